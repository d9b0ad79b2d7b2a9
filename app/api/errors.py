"""Translating every failure to the one error shape `{"error": {"code", "message"}}`, once.

A client error says what was wrong with the request; a server error says only what kind of
failure it was (its class's default message), while its detail (a driver's message, a database
name, a model server's URL) goes to the log, with the request and the session it concerns.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from app.errors import AgentServerError, DefinitionError, InvalidInputError, InvalidRequestError
from app.protocol.api import ErrorBody, ErrorDetail

logger = logging.getLogger(__name__)

_HTTP_CODES = {
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "request_too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
}

_CODED_ERROR_TYPES = {
    "json_invalid": "invalid_json",
    "invalid_session_id": "invalid_session_id",
    "unsupported_value": "unsupported_value",
}
"""Validation error types that have a code of their own, when every error of a request has it."""


def error_response(
    status: int,
    code: str,
    message: str,
    *,
    details: list[dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """A JSON error response in the API's one error shape."""
    body = ErrorBody(error=ErrorDetail(code=code, message=message, details=details))
    return JSONResponse(
        body.model_dump(by_alias=True, exclude_none=True), status_code=status, headers=headers
    )


def _about(request: Request) -> str:
    """The request, and the session it concerns when one is known, for the log."""
    session_id = getattr(request.state, "session_id", None) or request.path_params.get(
        "session_id", request.path_params.get("stream_id")
    )
    where = f"{request.method} {request.url.path}"
    return where if session_id is None else f"{where} (session {session_id})"


def _agent_server_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, AgentServerError)
    status = exc.http_status
    # A definition error reaching a request (e.g. a bad input for an agent) is the caller's 422.
    if isinstance(exc, DefinitionError):
        status = 422
    if status >= 500:
        logger.error("%s failed: %s: %s", _about(request), exc.code, exc.message)
        return error_response(status, exc.code, exc.default_message())
    details = exc.details if isinstance(exc, InvalidRequestError) else None
    if details and isinstance(exc, InvalidInputError):
        details = [{**detail, "loc": ["body", *detail["loc"]]} for detail in details]
    return error_response(status, exc.code, exc.message, details=details)


def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    details = []
    for error in errors:
        loc = [str(part) for part in error.get("loc", ())]
        message = str(error.get("msg", ""))
        if error.get("type") == "json_invalid":
            # FastAPI's location is the parser's offset; its message is in the context.
            loc = loc[:1]
            message = f"not JSON (RFC 8259): {error.get('ctx', {}).get('error', message)}"
        details.append({"loc": loc, "msg": message})
    summary = "; ".join(f"{'.'.join(d['loc'])}: {d['msg']}" for d in details) or "invalid request"
    types = {error.get("type") for error in errors}
    code = "invalid_request"
    if len(types) == 1:
        code = _CODED_ERROR_TYPES.get(str(types.pop()), code)
    return error_response(422, code, f"Invalid request: {summary}", details=details)


def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400:
        # FastAPI's answer to a body it cannot read: an invalid body, like any other, is a 422.
        return error_response(422, "invalid_request", f"Invalid request: {exc.detail}")
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    message = str(exc.detail)
    if exc.status_code == 404:
        message = _no_route(request)
    return error_response(exc.status_code, code, message, headers=getattr(exc, "headers", None))


def _no_route(request: Request) -> str:
    """Why no route took the request, with the path it probably meant."""
    path = request.url.path
    message = f"No route {request.method} {path}"
    trimmed = path.rstrip("/")
    if trimmed and trimmed != path:
        scope = {**request.scope, "path": trimmed}
        if any(route.matches(scope)[0] is not Match.NONE for route in request.app.router.routes):
            return f"{message}: paths take no trailing slash, use {trimmed}"
    return f"{message}: see /docs for the API's paths"


def _unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    logger.exception("%s failed", _about(request))
    return error_response(500, "internal_error", "The server failed to handle the request")


def install_error_handlers(app: FastAPI) -> None:
    """Make every error, ours or the framework's, answer in the one shape."""
    app.add_exception_handler(AgentServerError, _agent_server_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected_error)
