"""`GET /stream/{streamId}/ai-sdk` and `GET /stream/{streamId}/ag-ui`: the standard UI
protocols as views of the stored stream, resumable by sequence like the native stream.

A view follows the store exactly as `/stream` does (same follower, same pages); it turns each
page into its protocol's events at once and writes them in one send. To resume after N it first
replays chunks 1..N into the view's state (nothing is sent), so it can reopen what was open.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from typing import Annotated, Any, Protocol

import orjson
from fastapi import APIRouter, Path, Request
from sse_starlette import EventSourceResponse

from app.api.deps import runtime_of
from app.api.documented import Responses, errors
from app.api.routes.stream import HEARTBEAT, FromSequence, Token, open_stream
from app.api.routing import ApiRoute
from app.protocol import chunk_to_json
from app.protocol.ag_ui import AgUiView
from app.protocol.ai_sdk import DONE, HEADERS, UIMessageView
from app.protocol.values import SessionId
from app.runtime import StreamFollower
from app.store import StateStore
from app.store.records import StoredChunk

router = APIRouter(tags=["protocols"], route_class=ApiRoute)

REPLAY_PAGE = 1000
"""Chunks read at a time while replaying up to a resume point."""

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


Event = Mapping[str, object]
"""One event of a view (a `data:` line's JSON)."""


class View(Protocol):
    """What the protocol views have in common."""

    def replay(self, chunks: list[dict[str, Any]]) -> None: ...

    def opening(self) -> Sequence[Event]: ...

    def page(self, chunks: list[dict[str, Any]]) -> Sequence[Event]: ...

    def closing(self, status: str) -> Sequence[Event]: ...


def _data_event(title: str, description: str, data: dict[str, Any]) -> dict[str, Any]:
    """An SSE message of a view: a `data:` line, no `event:` line (so the type is `message`),
    no `id:`."""
    return {
        "title": title,
        "description": description,
        "type": "object",
        "required": ["event", "data"],
        "additionalProperties": False,
        "properties": {
            "event": {"const": "message", "description": "No `event:` line: a plain message."},
            "data": data,
        },
    }


def _json_data(component: str, what: str) -> dict[str, Any]:
    return {
        "type": "string",
        "contentMediaType": "application/json",
        "contentSchema": {"$ref": f"#/components/schemas/{component}"},
        "description": f"{what}, as JSON.",
    }


AI_SDK_PART_SCHEMA = "AiSdk.UIPart"
"""The component the document defines a UI message stream part as (`app.api.openapi`)."""
AG_UI_EVENT_SCHEMA = "AgUi.Event"
"""The component the document defines an AG-UI event as (`app.api.openapi`)."""

AI_SDK_EVENTS: dict[str, Any] = {
    "oneOf": [
        _data_event(
            "UIPartEvent",
            "One part of the message.",
            # Not `[DONE]` even where `contentSchema` is only an annotation (JSON Schema's default).
            {**_json_data(AI_SDK_PART_SCHEMA, "The part"), "not": {"const": DONE}},
        ),
        _data_event(
            "DoneEvent",
            "The last message, once the run stops; the response closes after it.",
            {"const": DONE, "description": f"`{DONE}`."},
        ),
    ]
}
"""Each SSE message of an AI SDK UI message stream."""

AG_UI_EVENTS: dict[str, Any] = _data_event(
    "AgUiEventMessage", "One AG-UI event.", _json_data(AG_UI_EVENT_SCHEMA, "The event")
)
"""Each SSE message of an AG-UI run."""

AI_SDK_HEADERS: dict[str, Any] = {
    name: {
        "description": "The UI message stream protocol's version, which the AI SDK checks.",
        "required": True,
        "schema": {"const": value},
    }
    for name, value in HEADERS.items()
}


def ai_sdk_answer(what: str) -> dict[str, Any]:
    """A 200 that is an AI SDK UI message stream: `what`, then each message's schema."""
    return {
        "description": (
            f"{what} Server-Sent Events, each described by `itemSchema`: one message per part "
            "(see `AiSdk.UIPart`), then `data: [DONE]` once the run stops, and the response "
            "closes. Idle streams get comment heartbeats (`: ping`)."
        ),
        "headers": AI_SDK_HEADERS,
        "content": {"text/event-stream": {"itemSchema": AI_SDK_EVENTS}},
    }


def ag_ui_answer(what: str) -> dict[str, Any]:
    """A 200 that is an AG-UI run: `what`, then each message's schema."""
    return {
        "description": (
            f"{what} Server-Sent Events, each described by `itemSchema`: one message per event "
            "(see `AgUi.Event`), from `RUN_STARTED` to `RUN_FINISHED` or `RUN_ERROR`, then "
            "the response closes. Idle streams get comment heartbeats (`: ping`)."
        ),
        "content": {"text/event-stream": {"itemSchema": AG_UI_EVENTS}},
    }


VIEW_ERRORS: Responses = errors(
    404, 422, 503, meaning={404: "Unknown stream.", 422: "Invalid id or fromSequence."}
)
"""The errors of a view of a stream."""


async def replay_into(store: StateStore, stream_id: str, after: int, view: View) -> None:
    """Feed the view the chunks up to `after`, which the client has had."""
    seen = 0
    while seen < after:
        chunks = await store.read_chunks(
            stream_id, after=seen, limit=min(REPLAY_PAGE, after - seen)
        )
        if not chunks:
            return  # deleted by retention: the view starts from what there is
        view.replay([orjson.loads(chunk_to_json(chunk)) for chunk in chunks])
        seen = chunks[-1].sequence


def encode(events: Sequence[Event]) -> bytes:
    """SSE messages with only `data:` lines, as both protocols use them."""
    return b"".join([b"data: " + orjson.dumps(event) + b"\n\n" for event in events])


async def view_events(
    view: View,
    follower: StreamFollower,
    first: list[StoredChunk],
    rest: AsyncGenerator[list[StoredChunk]],
    *,
    last: bytes = b"",
) -> AsyncIterator[bytes]:
    """The view's SSE body: its opening, a write per page, heartbeats, its closing."""

    def page(stored: list[StoredChunk]) -> bytes:
        events = view.page([orjson.loads(body) for _, body in stored])
        if follower.status is not None:
            return encode([*events, *view.closing(follower.status)]) + last
        return encode(events)

    async with contextlib.aclosing(rest):
        yield encode(view.opening()) + page(first)
        async for stored in rest:
            yield page(stored) if stored or follower.status is not None else HEARTBEAT


async def serve_view(
    request: Request,
    stream_id: str,
    after: int,
    make: Callable[[str], View],
    *,
    headers: dict[str, str] | None = None,
    last: bytes = b"",
) -> EventSourceResponse:
    """A view of the stream after `after`, as an SSE response."""
    runtime = runtime_of(request)
    root = await runtime.store.get_session(stream_id)
    view = make(root.agent_type)
    await replay_into(runtime.store, stream_id, after, view)
    follower, first, pages = await open_stream(request, stream_id, after)
    return EventSourceResponse(
        view_events(view, follower, first, pages, last=last),
        ping=0,
        headers={**SSE_HEADERS, **(headers or {})},
    )


StreamId = Annotated[SessionId, Path(description="A stream id.")]


@router.get(
    "/stream/{stream_id}/ai-sdk",
    response_class=EventSourceResponse,
    responses={
        200: ai_sdk_answer(
            "The Vercel AI SDK UI message stream (protocol v1) of the chunks after "
            "`fromSequence`: one assistant message."
        ),
        **VIEW_ERRORS,
    },
    summary="Follow a stream as an AI SDK UI message stream",
)
async def ai_sdk_stream(
    request: Request, stream_id: StreamId, from_sequence: FromSequence = 0, token: Token = None
) -> EventSourceResponse:
    """For `readUIMessageStream` and `useChat`: the root agent's text and tool calls as parts,
    each sub-agent as a `data-agent` part, a transient `data-cursor` part with the last
    sequence after each page (resume with `fromSequence`)."""
    return await serve_view(
        request,
        stream_id,
        from_sequence,
        lambda _type: UIMessageView(stream_id, message_id=f"{stream_id}-{from_sequence}"),
        headers=HEADERS,
        last=b"data: " + DONE.encode() + b"\n\n",
    )


@router.get(
    "/stream/{stream_id}/ag-ui",
    response_class=EventSourceResponse,
    responses={
        200: ag_ui_answer("AG-UI events (protocol 1.0) of the chunks after `fromSequence`."),
        **VIEW_ERRORS,
    },
    summary="Follow a stream as AG-UI events",
)
async def ag_ui_stream(
    request: Request, stream_id: StreamId, from_sequence: FromSequence = 0, token: Token = None
) -> EventSourceResponse:
    """For AG-UI clients: text messages, tool calls and results, sub-agents as AG-UI
    subagents (`SUBAGENT_STARTED` ... with `subagentRunId`), agent steps, the tree as state."""
    return await serve_view(
        request,
        stream_id,
        from_sequence,
        lambda agent_type: AgUiView(
            stream_id, agent_type, thread_id=stream_id, run_id=f"{stream_id}-{from_sequence}"
        ),
    )
