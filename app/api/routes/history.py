"""`GET /sessions` and `GET /sessions/{sessionId}/messages`: what a UI lists and re-renders.

The listing's cursor is the last session's creation time and id (`<createdAt>_<sessionId>`), so
the next page starts strictly after it however many sessions start meanwhile. Clients pass it on
as they got it; its pattern is in the document, and every string that matches it names a
position, so a cursor the document takes the server takes too.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse

from app.api.deps import runtime_of
from app.api.documented import errors
from app.api.routing import ApiRoute
from app.protocol import SessionStatus
from app.protocol.browser import (
    ConversationMessage,
    ConversationPage,
    SessionPage,
    SessionSummary,
    UsageTotals,
)
from app.protocol.values import SessionId
from app.store import SessionCursor, SessionRecord

router = APIRouter(tags=["history"], route_class=ApiRoute)

MAX_POSITION = 2**31 - 1
"""The last position a message can have: the stores keep it in a 32-bit column, which
PostgreSQL will not compare with a larger number."""

CURSOR_PATTERN = r"^[0-9]{1,15}_[A-Za-z0-9._:-]{1,200}$"
"""A creation time (ms since epoch), `_`, a session id: the digits hold no `_`, so the first one
ends them."""


def encode_cursor(record: SessionRecord) -> str:
    """The cursor just past `record`."""
    return f"{record.created_at}_{record.session_id}"


def decode_cursor(cursor: str) -> SessionCursor:
    """The position a cursor (matching `CURSOR_PATTERN`) names."""
    created_at, _, session_id = cursor.partition("_")
    return SessionCursor(int(created_at), session_id)


def summary(record: SessionRecord) -> SessionSummary:
    """A root session as the listing shows it."""
    return SessionSummary(
        session_id=record.session_id,
        agent_type=record.agent_type,
        status=record.status,
        created_at=record.created_at,
        updated_at=record.updated_at,
        step_count=record.step_count,
        stream_id=record.stream_id,
        parent_session_id=record.parent_session_id,
        error=record.error,
        usage=UsageTotals(input_tokens=record.input_tokens, output_tokens=record.output_tokens),
    )


@router.get(
    "/sessions",
    response_model=SessionPage,
    responses=errors(422, 503, meaning={422: "Invalid filter, cursor or limit."}),
    summary="List root sessions, newest first",
)
async def list_sessions(
    request: Request,
    status: Annotated[
        list[SessionStatus] | None,
        Query(description="Only sessions with one of these statuses (repeat the parameter)."),
    ] = None,
    agent_type: Annotated[
        str | None,
        Query(alias="agentType", min_length=1, max_length=200, description="Only this agent."),
    ] = None,
    cursor: Annotated[
        str | None,
        Query(pattern=CURSOR_PATTERN, description="`nextCursor` of the previous page."),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=200, description="Sessions per page.")] = 50,
) -> JSONResponse:
    """Root sessions (not sub-agents), newest first, a page at a time: follow `nextCursor`
    until it is null. Sub-agents are in each session's `/status?tree=true`."""
    before = None if cursor is None else decode_cursor(cursor)
    store = runtime_of(request).store
    records = await store.list_sessions(
        statuses=status or (), agent_type=agent_type, before=before, limit=limit + 1
    )
    more = len(records) > limit
    records = records[:limit]
    page = SessionPage(
        sessions=[summary(record) for record in records],
        next_cursor=encode_cursor(records[-1]) if more else None,
    )
    return JSONResponse(page.model_dump(by_alias=True))


@router.get(
    "/sessions/{session_id}/messages",
    response_model=ConversationPage,
    responses=errors(
        404, 422, 503, meaning={404: "Unknown session.", 422: "Invalid id, offset or limit."}
    ),
    summary="A session's conversation",
)
async def messages(
    request: Request,
    session_id: Annotated[SessionId, Path(description="A session id.")],
    offset: Annotated[
        int, Query(ge=0, le=MAX_POSITION, description="First message's position.")
    ] = 0,
    limit: Annotated[int, Query(ge=1, le=1000, description="Messages per page.")] = 200,
) -> JSONResponse:
    """The conversation as stored, oldest first: the user's messages, the assistant's (its text
    and tool calls) and the tool results, as the model reads them. The stream is for watching a
    run; this is for re-rendering one (chunks are deleted after `CHUNK_RETENTION_HOURS`,
    messages are not)."""
    store = runtime_of(request).store
    await store.get_session(session_id)
    found = await store.read_messages(session_id, offset=offset, limit=limit + 1)
    more = len(found) > limit
    page = ConversationPage(
        session_id=session_id,
        messages=[
            ConversationMessage(index=offset + i, message=message)
            for i, message in enumerate(found[:limit])
        ],
        next_offset=offset + limit if more else None,
    )
    return JSONResponse(page.model_dump(by_alias=True))
