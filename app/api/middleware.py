"""ASGI middleware that must see requests before routing: the bearer key and the body limit."""

from __future__ import annotations

import re
import secrets
from urllib.parse import parse_qs

from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import error_response
from app.api.tokens import StreamTokens

PUBLIC_PATHS = frozenset({"/healthz", "/readyz", "/openapi.json", "/docs", "/console"})
"""Paths that never need the API key: health checks, and the pages a browser loads before it
can hold a key (the API's description, its docs and the console, which asks for the key)."""

PUBLIC_PREFIXES = ("/docs/", "/console/")
"""Folders of static files (the docs' and the console's scripts and styles) that need no key."""

STREAM_PATH = re.compile(r"^/stream/([A-Za-z0-9._:-]{1,200})(?:/ai-sdk|/ag-ui)?$")
"""A stream and its protocol views: what a stream token opens."""


def bearer_token(authorization: bytes) -> bytes | None:
    """The token of an `Authorization: Bearer <token>` value, or None for another scheme. The
    scheme is case-insensitive and spaces may follow it (RFC 9110 section 11.4)."""
    scheme, _, token = authorization.partition(b" ")
    if scheme.lower() != b"bearer":
        return None
    return token.lstrip(b" ").rstrip(b" \t")


class ApiKeyMiddleware:
    """Requires `Authorization: Bearer <key>` on every path but health checks and static pages;
    a stream's GETs also take a stream token (`?token=`) minted for that stream."""

    def __init__(
        self, app: ASGIApp, *, api_key: str, stream_tokens: StreamTokens | None = None
    ) -> None:
        self.app = app
        self.expected = api_key.encode()
        self.stream_tokens = stream_tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"] if scope["type"] == "http" else ""
        if scope["type"] != "http" or path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES):
            await self.app(scope, receive, send)
            return
        token = bearer_token(dict(scope["headers"]).get(b"authorization", b""))
        authorized = token is not None and secrets.compare_digest(token, self.expected)
        if not authorized and not self._token_opens(scope):
            response = error_response(
                401,
                "unauthorized",
                "A valid API key is required: send `Authorization: Bearer <key>`",
                headers={"WWW-Authenticate": "Bearer"},
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _token_opens(self, scope: Scope) -> bool:
        if self.stream_tokens is None or scope["method"] != "GET":
            return False
        stream = STREAM_PATH.match(scope["path"])
        if stream is None:
            return False
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        tokens = query.get("token", [])
        return len(tokens) == 1 and self.stream_tokens.check(tokens[0], stream.group(1))


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
