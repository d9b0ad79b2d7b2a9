"""Request bodies: JSON by content type, strict JSON by parser, for every route that takes one.

Python's `json` (FastAPI's parser) takes `NaN`, `Infinity` and lone surrogates, which are not
JSON (RFC 8259) and which no store holds alike; orjson refuses them, so they are a 422
`invalid_json` like any malformed body. A body of another content type is a 415. The rules on
the values themselves (NUL characters, number range, depth) are the models' (`app.protocol.values`).
"""

from __future__ import annotations

import email.message
from collections.abc import Callable, Coroutine
from typing import Any

import orjson
from fastapi import Request, Response
from fastapi.routing import APIRoute

from app.errors import UnsupportedMediaTypeError

_NOT_PARSED: Any = object()


def is_json(content_type: str) -> bool:
    """Whether `content_type` is JSON: `application/json` or `application/*+json`, in UTF-8."""
    message = email.message.Message()
    message["content-type"] = content_type
    if message.get_content_maintype() != "application":
        return False
    subtype = message.get_content_subtype()
    charset = message.get_param("charset")
    utf8 = charset is None or (isinstance(charset, str) and charset.lower() in ("utf-8", "utf8"))
    return (subtype == "json" or subtype.endswith("+json")) and utf8


class JsonBodyRequest(Request):
    """A request whose body parses as strict JSON (orjson), once."""

    _parsed: Any = _NOT_PARSED

    async def json(self) -> Any:
        if self._parsed is _NOT_PARSED:
            # orjson's errors are `json.JSONDecodeError`s: FastAPI makes them 422s.
            self._parsed = orjson.loads(await self.body())
        return self._parsed


class JsonBodyRoute(APIRoute):
    """A route whose body, when it takes one, is strict JSON and sent as JSON."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler

        async def json_body_handler(request: Request) -> Response:
            request = JsonBodyRequest(request.scope, request.receive)
            if await request.body() and not is_json(request.headers.get("content-type", "")):
                raise UnsupportedMediaTypeError(
                    "Request bodies are JSON: send `Content-Type: application/json` (got "
                    f"{request.headers.get('content-type') or 'none'})"
                )
            return await handler(request)

        return json_body_handler
