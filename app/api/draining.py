"""SSE responses that end cleanly when the server shuts down.

sse-starlette notices the server's shutdown (uvicorn's exit flag) and, left to itself, cancels
the response mid-stream: the body never gets its last (empty) part, uvicorn logs "ASGI callable
returned without completing response", and a client sees a broken connection. Instead, it calls
`set()` on the `shutdown_event` it was given and waits up to `shutdown_grace_period` for the
response to finish: `StreamStop.set` cuts the wait for the next page short, `drained` then ends
the events, and the response completes normally. The client reconnects with `Last-Event-ID`
(to another worker or replica), and loses nothing: the page being read was never sent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from sse_starlette import EventSourceResponse


class StreamStop:
    """One response's shutdown signal, in the shape of the event sse-starlette sets."""

    __slots__ = ("stopped", "task", "waiting")

    def __init__(self) -> None:
        self.stopped = False
        self.task: asyncio.Task[Any] | None = None
        """The task writing the response, once it has asked for the first page."""
        self.waiting = False
        """Whether that task is waiting for the next page (rather than sending one)."""

    def set(self) -> None:
        """End the stream: at once if it waits for a page, else after the page being sent."""
        if self.stopped:
            return
        self.stopped = True
        if self.waiting and self.task is not None:
            self.task.cancel()


async def drained(events: AsyncIterator[bytes], stop: StreamStop) -> AsyncIterator[bytes]:
    """`events`, until they end or `stop` is set; a stop ends them without an error."""
    stop.task = task = asyncio.current_task()
    assert task is not None
    try:
        while not stop.stopped:
            stop.waiting = True
            try:
                page = await anext(events)
            except StopAsyncIteration:
                return
            except asyncio.CancelledError:
                if not stop.stopped:
                    raise
                task.uncancel()
                return
            finally:
                stop.waiting = False
            yield page
    finally:
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()


def sse_response(
    events: AsyncIterator[bytes], *, grace: float, **options: Any
) -> EventSourceResponse:
    """An `EventSourceResponse` of `events` that, when the server shuts down, ends within
    `grace` seconds with a complete response (see the module's docstring)."""
    stop = StreamStop()
    return EventSourceResponse(
        drained(events, stop),
        shutdown_event=stop,  # type: ignore[arg-type]  # sse-starlette only calls `set()`
        shutdown_grace_period=max(grace, 0.5),
        **options,
    )
