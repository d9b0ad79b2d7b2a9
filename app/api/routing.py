"""The route class of every API router: a request is read as the OpenAPI document describes it.

- A body, when the route takes one, is strict JSON sent as JSON (`JsonBodyRoute`).
- A query parameter the document gives one value is sent once. Starlette keeps the last of a
  repeated one, so `?fromSequence=x&fromSequence=5` would pass as 5 although the document
  says the parameter is an integer, not a list: it is a 422 instead, like any invalid value.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Coroutine
from typing import Any, Union, get_args, get_origin

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError

from app.api.bodies import JsonBodyRoute


def takes_many(annotation: Any) -> bool:
    """Whether a parameter of this type takes a list of values (`list[X]`, `list[X] | None`)."""
    origin = get_origin(annotation)
    if origin is Union or origin is types.UnionType:
        return any(takes_many(arg) for arg in get_args(annotation))
    return (origin or annotation) in (list, tuple, set, frozenset)


class ApiRoute(JsonBodyRoute):
    """A route whose body is strict JSON and whose single-valued query parameters are given
    at most once."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        single = tuple(
            field.alias
            for field in self.dependant.query_params
            if not takes_many(field.field_info.annotation)
        )
        if not single:
            return handler

        async def single_valued_handler(request: Request) -> Response:
            query = request.query_params
            repeated = [name for name in single if len(query.getlist(name)) > 1]
            if repeated:
                raise RequestValidationError(
                    [
                        {
                            "type": "repeated_parameter",
                            "loc": ("query", name),
                            "msg": "given more than once: it takes one value",
                            "input": query.getlist(name),
                        }
                        for name in repeated
                    ]
                )
            return await handler(request)

        return single_valued_handler
