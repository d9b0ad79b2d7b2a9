"""Translating every failure to the one error shape `{"error": {"code", "message"}}`, once."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.errors import AgentServerError, DefinitionError
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


def _agent_server_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, AgentServerError)
    status = exc.http_status
    # A definition error reaching a request (e.g. a bad input for an agent) is the caller's 422.
    if isinstance(exc, DefinitionError):
        status = 422
    if status >= 500:
        logger.error("%s %s failed: %s", request.method, request.url.path, exc.message)
    return error_response(status, exc.code, exc.message)


def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    details = [
        {"loc": [str(part) for part in error.get("loc", ())], "msg": str(error.get("msg", ""))}
        for error in exc.errors()
    ]
    summary = "; ".join(f"{'.'.join(d['loc'])}: {d['msg']}" for d in details) or "invalid request"
    return error_response(422, "invalid_request", f"Invalid request: {summary}", details=details)


def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400:
        # FastAPI's answer to a body it cannot decode (not UTF-8, say): an invalid body, like
        # any other, is a 422 (DESIGN.md section 5).
        return error_response(422, "invalid_request", f"Invalid request: {exc.detail}")
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    return error_response(
        exc.status_code, code, str(exc.detail), headers=getattr(exc, "headers", None)
    )


def _unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    logger.exception("%s %s failed", request.method, request.url.path)
    return error_response(500, "internal_error", "The server failed to handle the request")


def install_error_handlers(app: FastAPI) -> None:
    """Make every error, ours or the framework's, answer in the one shape."""
    app.add_exception_handler(AgentServerError, _agent_server_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected_error)
