"""Stream tokens: how a browser's `EventSource`, which cannot send headers, follows a stream
when the server wants an API key.

An authenticated `POST /stream/{streamId}/token` mints a token that opens that one stream (and
its protocol views) until it expires: `GET /stream/{streamId}?token=...`. The token is an HMAC
of the stream id and the expiry under a key derived from `API_KEY`, so every replica that shares
the key accepts it, nothing is stored, and it cannot open another stream. A stream connection
that outlives the token stays open; a reconnection after the expiry is a 401, after which the
client mints a new token and goes on with `?fromSequence=`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass

TOKEN_PATTERN = r"^[0-9]{1,15}\.[A-Za-z0-9_-]{43}$"
"""What a token looks like: its expiry (ms since epoch), a dot, its signature (base64url)."""

_TOKEN = re.compile(TOKEN_PATTERN)
_CONTEXT = b"agent-server stream token v1"


@dataclass(frozen=True, slots=True)
class StreamTokens:
    """Mints and checks stream tokens under one key."""

    key: bytes
    ttl_ms: int

    @classmethod
    def for_api_key(cls, api_key: str | None, *, ttl_seconds: float) -> StreamTokens:
        """Tokens keyed by `api_key` (a random key of this process when there is none: tokens
        are then never needed, and minting them still works)."""
        secret = api_key.encode() if api_key is not None else secrets.token_bytes(32)
        key = hmac.new(secret, _CONTEXT, hashlib.sha256).digest()
        return cls(key, int(ttl_seconds * 1000))

    def mint(self, stream_id: str, *, now_ms: int | None = None) -> tuple[str, int]:
        """A token for `stream_id` and the time (ms since epoch) it expires."""
        now = now_ms if now_ms is not None else time.time_ns() // 1_000_000
        expires = now + self.ttl_ms
        return f"{expires}.{self._sign(stream_id, expires)}", expires

    def check(self, token: str, stream_id: str, *, now_ms: int | None = None) -> bool:
        """Whether `token` opens `stream_id` now."""
        if not _TOKEN.match(token):
            return False
        expiry, signature = token.split(".", 1)
        now = now_ms if now_ms is not None else time.time_ns() // 1_000_000
        if int(expiry) < now:
            return False
        return hmac.compare_digest(signature, self._sign(stream_id, int(expiry)))

    def _sign(self, stream_id: str, expires: int) -> str:
        digest = hmac.new(self.key, f"{stream_id}\n{expires}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
