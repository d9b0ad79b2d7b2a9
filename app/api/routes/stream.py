"""`GET /stream/{streamId}`: a run's chunks as Server-Sent Events, resumable by sequence."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Query, Request
from sse_starlette import EventSourceResponse, ServerSentEvent

from app.api.deps import runtime_of, settings_of
from app.ids import SESSION_ID_PATTERN
from app.protocol.api import ErrorBody
from app.runtime import StreamFollower
from app.store.base import StoredChunk

router = APIRouter(tags=["stream"])

RECONNECT_MS = 1000
"""The `retry:` a browser's EventSource waits before it reconnects by itself."""

HEARTBEAT = ServerSentEvent(comment="ping").encode()
"""What a stream sends after each `STREAM_HEARTBEAT` seconds without a chunk: a comment, which
keeps proxies from closing the connection and which clients ignore."""

STREAM_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": (
            "One SSE message per chunk: `id:` is its sequence and `data:` the chunk's JSON (see "
            "the `Chunk` schema). When the run stops, a last message `event: end` with data "
            '`{"status": ...}`, then the response closes. Idle streams get comment heartbeats.'
        ),
        "content": {"text/event-stream": {"schema": {"$ref": "#/components/schemas/Chunk"}}},
    },
    404: {"model": ErrorBody, "description": "Unknown stream."},
    422: {"model": ErrorBody, "description": "Invalid id, sequence or Last-Event-ID."},
}


@router.get(
    "/stream/{stream_id}",
    response_class=EventSourceResponse,
    responses=STREAM_RESPONSES,
    summary="Follow a run's stream",
)
async def stream(
    request: Request,
    stream_id: Annotated[str, Path(pattern=SESSION_ID_PATTERN)],
    from_sequence: Annotated[
        int, Query(alias="fromSequence", ge=0, description="Send the chunks after this one.")
    ] = 0,
    last_event_id: Annotated[
        str | None,
        Header(
            alias="Last-Event-ID",
            pattern=r"^\s*\d*\s*$",
            description="Same as fromSequence (a sequence number); wins over it.",
        ),
    ] = None,
) -> EventSourceResponse:
    """Replay the stored chunks after the given sequence, then follow the live tail until the run
    stops. A client that disconnects never affects the run; it reconnects with `Last-Event-ID`."""
    runtime = runtime_of(request)
    settings = settings_of(request)
    after = from_sequence
    if last_event_id is not None and last_event_id.strip():
        after = int(last_event_id)
    follower = runtime.follow(stream_id, from_sequence=after, poll=settings.stream_poll)
    pages = follower.pages(idle=settings.stream_heartbeat)
    try:
        first = await anext(pages)  # an unknown stream is a 404, before the response starts
    except BaseException:
        await pages.aclose()
        raise
    # The heartbeat is the follower's idle page, not sse-starlette's ping: its task (a timer,
    # a lock per ping, a cancel scope) cost 1.8% of the instructions of a peer tree over HTTP.
    return EventSourceResponse(
        _events(follower, first, pages),
        ping=0,
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _events(
    follower: StreamFollower, first: list[StoredChunk], rest: AsyncGenerator[list[StoredChunk]]
) -> AsyncIterator[bytes]:
    # One write per page of chunks, not per chunk: each ASGI send costs more than a chunk's
    # encoding (a page at once doubled the chunks/s one client gets, in bench/sse_delivery.py).
    # The reconnection delay goes with the first page and the end with the last, so a short
    # run's stream costs a few writes (each is a send through every middleware and a syscall).
    opening = ServerSentEvent(retry=RECONNECT_MS, comment="stream").encode()
    async with contextlib.aclosing(rest):
        yield opening + _page(first, follower)
        async for page in rest:
            yield _page(page, follower) if page or follower.status is not None else HEARTBEAT


def _page(page: list[StoredChunk], follower: StreamFollower) -> bytes:
    # The stored JSON goes out as it is: a chunk is never parsed or serialised again per client.
    events = "".join([f"id: {sequence}\r\ndata: {body}\r\n\r\n" for sequence, body in page])
    if follower.status is not None:
        end = ServerSentEvent(data=json.dumps({"status": follower.status}), event="end")
        return events.encode() + end.encode()
    return events.encode()
