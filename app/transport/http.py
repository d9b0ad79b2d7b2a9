"""`HttpRemoteAgentTransport`: another agent server's HTTP + SSE API, as a remote sub-agent uses it.

One `httpx.AsyncClient` per transport, opened on first use and closed with the server. Requests
that fail for reasons worth retrying (connection errors, timeouts, 5xx) are retried with jittered
backoff, a bounded number of times; a stream that drops reconnects with `Last-Event-ID`, so
nothing is repeated or lost. Every failure surfaces as `RemoteAgentError`.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

import httpx
from httpx_sse import aconnect_sse

from app.errors import RemoteAgentError
from app.protocol import Chunk, chunk_from_json
from app.protocol.api import SessionStatusView, StartResponse

logger = logging.getLogger(__name__)

T = TypeVar("T")

_RETRYABLE_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


class _Retryable(Exception):
    pass


class HttpRemoteAgentTransport:
    """Talks to the agent server at `url` (its `/start`, `/stream`, `/status`, `/interrupt` and
    `/resume`). `attempts` bounds the tries of one request, and of the reconnects of a stream
    that makes no progress; waits between them grow from `backoff` up to `max_backoff` seconds."""

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = 30.0,
        attempts: int = 5,
        backoff: float = 0.2,
        max_backoff: float = 5.0,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise RemoteAgentError(f"A remote agent server URL must be http(s), got {url!r}")
        self.url = url.rstrip("/")
        self.headers = dict(headers or {})
        self.timeout = timeout
        self.attempts = max(attempts, 1)
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._client: httpx.AsyncClient | None = None

    def __repr__(self) -> str:
        return f"HttpRemoteAgentTransport({self.url!r})"

    @property
    def client(self) -> httpx.AsyncClient:
        """The shared HTTP client (made on first use, in the running event loop)."""
        if self._client is None or self._client.is_closed:
            self._client = httpx.AsyncClient(
                base_url=self.url,
                headers=self.headers,
                timeout=httpx.Timeout(self.timeout, read=None),
            )
        return self._client

    async def aclose(self) -> None:
        """Close the HTTP client."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    # -- the API -------------------------------------------------------------------------------

    async def start(
        self,
        agent_type: str,
        *,
        session_id: str,
        message: str,
        input: Any = None,
        parent_session_id: str | None = None,
    ) -> StartResponse:
        """Start (or find again: the session id is the idempotency key) a remote session."""
        body = {
            "agentType": agent_type,
            "sessionId": session_id,
            "message": message,
            "input": input,
            "parentSessionId": parent_session_id,
        }
        headers = {"Idempotency-Key": session_id}
        response = await self._request("POST", "/start", json=body, headers=headers)
        return StartResponse.model_validate(response.json())

    async def get_status(self, session_id: str) -> SessionStatusView | None:
        """The remote session's status, or None if the remote server does not know it."""
        response = await self._request("GET", f"/status/{session_id}", missing_ok=True)
        if response.status_code == 404:
            return None
        return SessionStatusView.model_validate(response.json())

    async def interrupt(self, session_id: str, reason: str | None = None) -> None:
        """Ask the remote session and its tree to stop."""
        await self._request("POST", f"/interrupt/{session_id}", json={"reason": reason})

    async def resume(self, session_id: str) -> None:
        """Resume an interrupted remote session from its checkpoint."""
        await self._request("POST", f"/resume/{session_id}", json={})

    async def stream(self, session_id: str, from_sequence: int = 0) -> AsyncIterator[Chunk]:
        """The remote stream's chunks after `from_sequence` until its run stops, reconnecting
        with `Last-Event-ID` when the connection drops."""
        after = from_sequence
        failures = 0
        while True:
            progressed = False
            try:
                async with aconnect_sse(
                    self.client,
                    "GET",
                    f"/stream/{session_id}",
                    headers={"Last-Event-ID": str(after)},
                ) as source:
                    await self._check(source.response, f"stream {session_id!r}")
                    async for event in source.aiter_sse():
                        if not event.data:
                            continue  # a heartbeat comment
                        if event.event == "end":
                            return
                        chunk = chunk_from_json(event.data)
                        if chunk.sequence <= after:
                            continue
                        after = chunk.sequence
                        progressed = True
                        yield chunk
                raise _Retryable("the stream closed before its end")
            except (httpx.TransportError, _Retryable) as exc:
                failures = 0 if progressed else failures + 1
                if failures >= self.attempts:
                    raise RemoteAgentError(
                        f"Lost the stream of remote session {session_id!r} at {self.url}: {exc}"
                    ) from exc
                await self._pause(failures, f"stream {session_id!r} dropped ({exc})")
            except ValueError as exc:
                raise RemoteAgentError(
                    f"Remote session {session_id!r} at {self.url} sent a bad chunk: {exc}"
                ) from exc

    # -- plumbing ------------------------------------------------------------------------------

    async def _request(
        self, method: str, path: str, *, missing_ok: bool = False, **kwargs: Any
    ) -> httpx.Response:
        async def once() -> httpx.Response:
            response = await self.client.request(method, path, **kwargs)
            if response.status_code == 404 and missing_ok:
                return response
            await self._check(response, f"{method} {path}")
            return response

        return await self._retrying(once, f"{method} {path}")

    async def _retrying(self, call: Callable[[], Awaitable[T]], what: str) -> T:
        for attempt in range(1, self.attempts + 1):
            try:
                return await call()
            except (httpx.TransportError, _Retryable) as exc:
                if attempt == self.attempts:
                    raise RemoteAgentError(
                        f"{what} at {self.url} failed after {attempt} attempts: "
                        f"{exc or type(exc).__name__}"
                    ) from exc
                await self._pause(attempt, f"{what} failed ({exc or type(exc).__name__})")
        raise AssertionError("unreachable")  # pragma: no cover

    async def _pause(self, attempt: int, why: str) -> None:
        ceiling = min(self.backoff * 2 ** (attempt - 1), self.max_backoff)
        wait = ceiling / 2 + random.uniform(0, ceiling / 2)
        logger.warning("Remote agent server %s: %s; retrying in %.2fs", self.url, why, wait)
        await asyncio.sleep(wait)

    async def _check(self, response: httpx.Response, what: str) -> None:
        if response.status_code < 400:
            return
        if response.status_code in _RETRYABLE_STATUS:
            raise _Retryable(f"HTTP {response.status_code}")
        await response.aread()
        try:
            error = response.json()["error"]
            detail = f"{error['code']}: {error['message']}"
        except (ValueError, KeyError, TypeError):
            detail = response.text[:300]
        raise RemoteAgentError(f"{what} at {self.url} answered {response.status_code}: {detail}")
