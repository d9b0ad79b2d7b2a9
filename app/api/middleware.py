"""ASGI middleware that must see requests before routing: the bearer key and the body limit."""

from __future__ import annotations

import secrets

from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import error_response

PUBLIC_PATHS = frozenset({"/healthz", "/readyz"})
"""Paths that never need the API key."""


class ApiKeyMiddleware:
    """Requires `Authorization: Bearer <key>` on every path but health checks."""

    def __init__(self, app: ASGIApp, *, api_key: str) -> None:
        self.app = app
        self.expected = f"Bearer {api_key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in PUBLIC_PATHS:
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"authorization", b"")
        if not secrets.compare_digest(given, self.expected):
            response = error_response(
                401,
                "unauthorized",
                "A valid API key is required: send `Authorization: Bearer <key>`",
                headers={"WWW-Authenticate": "Bearer"},
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


class BodyTooLarge(StarletteHTTPException):
    """Raised while a body streams in past the limit; FastAPI passes HTTP errors through."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(413, f"Request bodies are limited to {max_bytes} bytes")


class BodyLimitMiddleware:
    """Refuses request bodies over `max_bytes` with a 413, declared or streamed."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(scope, receive, send)
            return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        await self.app(scope, limited_receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = error_response(
            413, "request_too_large", f"Request bodies are limited to {self.max_bytes} bytes"
        )
        await response(scope, receive, send)
