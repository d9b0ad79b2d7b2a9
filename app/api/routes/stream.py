"""`GET /stream/{streamId}`: a run's chunks as Server-Sent Events, resumable by sequence."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Path, Query, Request, Response
from pydantic import AfterValidator, WithJsonSchema
from pydantic_core import PydanticCustomError
from sse_starlette import EventSourceResponse, ServerSentEvent

from app import observability
from app.api.deps import runtime_of, settings_of
from app.api.documented import Responses, errors
from app.api.draining import sse_response
from app.api.routing import ApiRoute
from app.api.tokens import TOKEN_PATTERN
from app.protocol.api import StreamEnd
from app.protocol.values import MAX_SEQUENCE, SequenceNumber, SessionId
from app.runtime import StreamFollower
from app.store.records import StoredChunk
from app.transport.http import HEARTBEAT_HEADER

router = APIRouter(tags=["stream"], route_class=ApiRoute)

RECONNECT_MS = 1000
"""The `retry:` a browser's EventSource waits before it reconnects by itself."""

HEARTBEAT = ServerSentEvent(comment="ping").encode()
"""What a stream sends after each `STREAM_HEARTBEAT` seconds without a chunk: a comment, which
keeps proxies from closing the connection and which clients ignore."""

CHUNK_EVENT: dict[str, Any] = {
    "title": "ChunkEvent",
    "description": "One chunk: `id:` is its sequence, `data:` its JSON.",
    "type": "object",
    "required": ["data"],
    "properties": {
        "event": {
            "type": "string",
            "description": "No `event:` line (a plain message); with `events=named`, the "
            "chunk's type.",
        },
        "id": {"type": "string", "pattern": "^[0-9]+$", "description": "The chunk's sequence."},
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "contentSchema": {"$ref": "#/components/schemas/Chunk"},
            "description": "The chunk, as JSON.",
        },
        "retry": {"type": "integer", "description": "How long to wait before reconnecting (ms)."},
    },
}
END_EVENT: dict[str, Any] = {
    "title": "EndEvent",
    "description": "The last message, once the run stops; the response closes after it.",
    "type": "object",
    "required": ["event", "data"],
    "properties": {
        "event": {"const": "end", "description": "`event: end`."},
        "id": {
            "type": "string",
            "pattern": "^[0-9]+-end$",
            "description": "`<N>-end`, N the last sequence sent: a reconnection with it as "
            "`Last-Event-ID` answers 204 when nothing follows.",
        },
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "contentSchema": {"$ref": "#/components/schemas/StreamEnd"},
            "description": "How the run stopped, as JSON.",
        },
        "retry": {"type": "integer", "description": "How long to wait before reconnecting (ms)."},
    },
}

STREAM_RESPONSES: Responses = {
    200: {
        "description": (
            "Server-Sent Events, each described by `itemSchema`: one message per chunk (`id:` "
            "its sequence, `data:` the chunk's JSON, see `Chunk`; with `events=named`, "
            "`event:` is the chunk's type), then, when the run stops, a last message "
            "`event: end` whose data is `StreamEnd`, and the response closes. Idle streams get "
            "comment heartbeats (`: ping`), at least as often as the `Heartbeat-Interval` "
            "header says (seconds)."
        ),
        "content": {
            "text/event-stream": {"itemSchema": {"oneOf": [CHUNK_EVENT, END_EVENT]}},
        },
    },
    204: {
        "description": (
            "The client reconnected after the `end` event (`Last-Event-ID: <N>-end`), the run "
            "has stopped and nothing follows N: a browser's EventSource stops reconnecting."
        )
    },
    **errors(
        404,
        422,
        503,
        meaning={404: "Unknown stream.", 422: "Invalid id, fromSequence or Last-Event-ID."},
    ),
}
"""The stream's answers; FastAPI's own SSE description has no place for two kinds of event."""

LAST_EVENT_ID_PATTERN = r"^\s*[0-9]{1,19}(-end)?\s*$"


def _check_last_event_id(value: str) -> str:
    resume_point(0, value)
    return value


def resume_point(from_sequence: int, last_event_id: str | None) -> tuple[int, bool]:
    """The sequence to send chunks after, and whether the client says it saw the end."""
    if last_event_id is None:
        return from_sequence, False
    digits = last_event_id.strip()
    saw_end = digits.endswith("-end")
    if saw_end:
        digits = digits[:-4]
    if not (digits.isascii() and digits.isdigit() and len(digits) <= 19):
        raise PydanticCustomError(
            "int_parsing", "Last-Event-ID is a sequence number (1 to 19 digits), or `<N>-end`"
        )
    if int(digits) > MAX_SEQUENCE:
        raise PydanticCustomError(
            "less_than_equal", "a sequence number is at most {max}", {"max": MAX_SEQUENCE}
        )
    return int(digits), saw_end


LastEventId = Annotated[
    str,
    AfterValidator(_check_last_event_id),
    WithJsonSchema({"type": "string", "pattern": LAST_EVENT_ID_PATTERN}),
]
"""`Last-Event-ID`: a sequence, or `<N>-end` (the id of the end event): after N, and the client
saw the end."""

FromSequence = Annotated[
    SequenceNumber,
    Query(alias="fromSequence", description="Send the chunks after this sequence."),
]

Token = Annotated[
    str | None,
    Query(
        pattern=TOKEN_PATTERN,
        description="A stream token (`POST /stream/{streamId}/token`) where no key can be sent.",
    ),
]


async def open_stream(
    request: Request, stream_id: str, after: int
) -> tuple[StreamFollower, list[StoredChunk], AsyncGenerator[list[StoredChunk]]]:
    """A follower of the stream after `after`, its first page (read now, so an unknown stream
    is a 404 before the response starts) and the rest of its pages."""
    settings = settings_of(request)
    follower = runtime_of(request).follow(stream_id, from_sequence=after, poll=settings.stream_poll)
    pages = follower.pages(idle=settings.stream_heartbeat)
    try:
        first = await anext(pages)
    except BaseException:
        await pages.aclose()
        raise
    return follower, first, pages


@router.get(
    "/stream/{stream_id}",
    response_class=EventSourceResponse,
    responses=STREAM_RESPONSES,
    summary="Follow a run's stream",
)
async def stream(
    request: Request,
    stream_id: Annotated[SessionId, Path(description="The root session's id.")],
    from_sequence: FromSequence = 0,
    last_event_id: Annotated[
        LastEventId | None,
        Header(
            alias="Last-Event-ID",
            description=(
                "Same as fromSequence (the last `id:` received), and wins over it; `<N>-end`, "
                "the id of the `end` event, means after N, and answers 204 if nothing follows "
                "a stopped run."
            ),
        ),
    ] = None,
    events: Annotated[
        Literal["native", "named"],
        Query(
            description=(
                "`named` gives each message an `event:` line with the chunk's type (listen "
                "with `addEventListener`); `native` (the default) leaves it out, for `onmessage`."
            )
        ),
    ] = "native",
    token: Token = None,
) -> Response:
    """Replay the stored chunks after the given sequence, then follow the live tail until the run
    stops. A client that disconnects never affects the run; it reconnects with `Last-Event-ID`."""
    after, saw_end = resume_point(from_sequence, last_event_id)
    follower, first, pages = await open_stream(request, stream_id, after)
    if saw_end and not first and follower.status is not None:
        # The browser's automatic reconnection after the end: a 204 makes it stop for good.
        await pages.aclose()
        return Response(status_code=204)
    # The heartbeat is the follower's idle page, not sse-starlette's ping: its task (a timer,
    # a lock per ping, a cancel scope) cost 1.8% of the instructions of a peer tree over HTTP.
    return sse_response(
        _events(follower, first, pages, named=events == "named"),
        grace=settings_of(request).shutdown_timeout,
        ping=0,
        headers={
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
            HEARTBEAT_HEADER: f"{settings_of(request).stream_heartbeat:g}",
        },
    )


async def _events(
    follower: StreamFollower,
    first: list[StoredChunk],
    rest: AsyncGenerator[list[StoredChunk]],
    *,
    named: bool,
) -> AsyncIterator[bytes]:
    # One write per page of chunks, not per chunk: each ASGI send costs more than a chunk's
    # encoding (a page at once doubled the chunks/s one client gets, in bench/sse_delivery.py).
    # The reconnection delay goes with the first page and the end with the last, so a short
    # run's stream costs a few writes (each is a send through every middleware and a syscall).
    opening = ServerSentEvent(retry=RECONNECT_MS, comment="stream").encode()
    page_of = _named_page if named else _page
    sent = observability.chunks_sent
    async with contextlib.aclosing(rest), observability.sse_client():
        sent(len(first))
        yield opening + page_of(first, follower)
        async for page in rest:
            sent(len(page))
            yield page_of(page, follower) if page or follower.status is not None else HEARTBEAT


def _page(page: list[StoredChunk], follower: StreamFollower) -> bytes:
    # The stored JSON goes out as it is: a chunk is never parsed or serialised again per client.
    events = "".join([f"id: {sequence}\r\ndata: {body}\r\n\r\n" for sequence, body in page])
    return events.encode() + _end(follower)


def _named_page(page: list[StoredChunk], follower: StreamFollower) -> bytes:
    events = "".join(
        [
            f"id: {sequence}\r\nevent: {chunk_type(body)}\r\ndata: {body}\r\n\r\n"
            for sequence, body in page
        ]
    )
    return events.encode() + _end(follower)


def _end(follower: StreamFollower) -> bytes:
    if follower.status is None:
        return b""
    # Its id tells a browser's automatic reconnection apart from a client that missed the end.
    data = json.dumps(StreamEnd(status=follower.status).model_dump(mode="json"))
    end = ServerSentEvent(data=data, event="end", id=f"{follower.after}-end")
    return end.encode()


_TYPE_AT = len('{"type":"')


def chunk_type(body: str) -> str:
    """The `type` of a stored chunk, read from its JSON without parsing it: `chunk_to_json`
    writes the fields in order, `type` first."""
    if body.startswith('{"type":"'):
        return body[_TYPE_AT : body.index('"', _TYPE_AT)]
    kind: str = json.loads(body)["type"]
    return kind
