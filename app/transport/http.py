"""`HttpRemoteAgentTransport`: another agent server's HTTP + SSE API, as a remote sub-agent uses it.

One `httpx.AsyncClient` per transport, opened on first use and closed with the server. Requests
that fail for reasons worth retrying (connection errors, timeouts, 5xx) are retried with jittered
backoff for as long as `retry_for` allows, so a remote server that restarts is waited for; a
stream that drops, or stays silent past the remote's heartbeat (a half-open connection),
reconnects with `Last-Event-ID`, so nothing is repeated or lost. Every failure surfaces as
`RemoteAgentError`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import httpx
from httpx_sse import aconnect_sse

from app import observability
from app.backoff import backoff_delay
from app.errors import RemoteAgentError
from app.protocol import Chunk, chunk_from_json
from app.protocol.api import SessionStatusView, StartResponse

logger = logging.getLogger(__name__)

T = TypeVar("T")

_RETRYABLE_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})

HEARTBEAT_HEADER = "Heartbeat-Interval"
"""The response header in which a stream says how often it sends a heartbeat when quiet."""


class _Retryable(Exception):
    pass


class _Outage:
    """Failures in a row of one request or stream, and since when, against a time budget."""

    def __init__(self, budget: float) -> None:
        self.budget = budget
        self.failures = 0
        self.since: float | None = None

    def remaining(self) -> float:
        """Seconds of the budget left after one more failure."""
        now = asyncio.get_running_loop().time()
        if self.since is None:
            self.since = now
        self.failures += 1
        return self.budget - (now - self.since)


class HttpRemoteAgentTransport:
    """Talks to the agent server at `url` (its `/start`, `/stream`, `/status`, `/interrupt` and
    `/resume`).

    A request that fails in a way worth retrying, or a stream that drops without progress, is
    tried again for up to `retry_for` seconds of failures in a row (a restarting server is
    waited for; the remote tool's own timeout bounds the whole call), with waits growing from
    `backoff` up to `max_backoff` seconds. A stream quiet for longer than twice the heartbeat
    its server announces (or `stream_idle` seconds when it announces none) is taken as dropped.
    """

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = 30.0,
        retry_for: float = 120.0,
        backoff: float = 0.2,
        max_backoff: float = 5.0,
        stream_idle: float = 60.0,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise RemoteAgentError(f"A remote agent server URL must be http(s), got {url!r}")
        self.url = url.rstrip("/")
        self.headers = dict(headers or {})
        self.timeout = timeout
        self.retry_for = retry_for
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.stream_idle = stream_idle
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
        headers = {"Idempotency-Key": session_id, **observability.trace_headers()}
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

    async def resume(
        self,
        session_id: str,
        *,
        tool_results: Sequence[Mapping[str, Any]] | None = None,
        approvals: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        """Resume an interrupted remote session from its checkpoint, or answer what its paused
        tree waits for."""
        body: dict[str, Any] = {}
        if tool_results:
            body["toolResults"] = list(tool_results)
        if approvals:
            body["approvals"] = list(approvals)
        await self._request(
            "POST", f"/resume/{session_id}", json=body, headers=observability.trace_headers()
        )

    async def stream(self, session_id: str, from_sequence: int = 0) -> AsyncIterator[Chunk]:
        """The remote stream's chunks after `from_sequence` until its run stops, reconnecting
        with `Last-Event-ID` when the connection drops or goes silent."""
        after = from_sequence
        outage = _Outage(self.retry_for)
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
                    idle = self._idle_limit(source.response)
                    events = source.aiter_sse()
                    while True:
                        try:
                            async with asyncio.timeout(idle):
                                event = await anext(events)
                        except StopAsyncIteration:
                            break
                        except TimeoutError:
                            raise _Retryable(f"nothing heard for {idle:g}s") from None
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
                if progressed:
                    outage = _Outage(self.retry_for)
                observability.remote_reconnect()
                await self._after_failure(
                    outage,
                    f"stream {session_id!r} dropped",
                    f"Lost the stream of remote session {session_id!r}",
                    exc,
                )
            except ValueError as exc:
                raise RemoteAgentError(
                    f"Remote session {session_id!r} at {self.url} sent a bad chunk: {exc}"
                ) from exc

    def _idle_limit(self, response: httpx.Response) -> float:
        """How long the stream may stay silent before it is taken as dropped."""
        try:
            heartbeat = float(response.headers.get(HEARTBEAT_HEADER, ""))
        except ValueError:
            return self.stream_idle
        return 2 * heartbeat + 5 if heartbeat > 0 else self.stream_idle

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
        outage = _Outage(self.retry_for)
        while True:
            try:
                return await call()
            except (httpx.TransportError, _Retryable) as exc:
                await self._after_failure(outage, f"{what} failed", what, exc)

    async def _after_failure(
        self, outage: _Outage, what: str, failed: str, exc: BaseException
    ) -> None:
        """Wait before trying again, or raise `RemoteAgentError` once the outage has lasted
        the whole budget."""
        reason = str(exc) or type(exc).__name__
        left = outage.remaining()
        if left <= 0:
            raise RemoteAgentError(
                f"{failed} at {self.url} failed for {self.retry_for:g}s "
                f"({outage.failures} attempts): {reason}"
            ) from exc
        wait = min(backoff_delay(outage.failures, self.backoff, self.max_backoff), left)
        logger.warning(
            "Remote agent server %s: %s (%s); retrying in %.2fs", self.url, what, reason, wait
        )
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
