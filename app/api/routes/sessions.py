"""`POST /start`, `GET /status`, `POST /interrupt` and `POST /resume`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Header, Path, Query, Request
from fastapi.responses import JSONResponse

from app.api.deps import runtime_of
from app.api.documented import errors
from app.api.routing import ApiRoute
from app.protocol.api import (
    InterruptRequest,
    InterruptResponse,
    ResumeRequest,
    SessionStatusView,
    StartRequest,
    StartResponse,
)
from app.protocol.browser import SessionTreeView
from app.protocol.values import IDEMPOTENCY_KEY_PATTERN, SessionId
from app.store import SessionRecord

router = APIRouter(tags=["sessions"], route_class=ApiRoute)

SessionIdPath = Annotated[SessionId, Path(description="A session id (`^[A-Za-z0-9._:-]{1,200}$`).")]


def _answer(record: SessionRecord, status_code: int) -> JSONResponse:
    body = StartResponse(
        session_id=record.session_id,
        stream_id=record.stream_id,
        status=record.status,
        agent_type=record.agent_type,
    )
    return JSONResponse(body.model_dump(by_alias=True), status_code=status_code)


@router.post(
    "/start",
    status_code=201,
    response_model=StartResponse,
    responses={
        200: {"model": StartResponse, "description": "It existed already: nothing started."},
        **errors(404, 409, 413, 415, 422, 503),
    },
    summary="Start a session",
)
async def start(
    request: Request,
    body: Annotated[StartRequest, Body()],
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            pattern=IDEMPOTENCY_KEY_PATTERN,
            description="Makes the start safe to retry: a request repeated with the same key "
            "answers 200 with the session the first one created; the key with another body "
            "is a 422 (`idempotency_key_reused`).",
        ),
    ] = None,
) -> JSONResponse:
    """Start a root session of `agentType` and answer as soon as it is stored; the run goes on
    without the client. A repeated `Idempotency-Key`, or the id of a running session, answers
    200 with that session and starts nothing; the id of a stopped session is 409."""
    request.state.session_id = body.session_id
    started = await runtime_of(request).start(
        body.agent_type,
        body.message,
        input=body.input,
        session_id=body.session_id,
        parent_session_id=body.parent_session_id,
        idempotency_key=idempotency_key,
    )
    return _answer(started.record, 201 if started.created else 200)


@router.get(
    "/status/{session_id}",
    response_model=SessionStatusView | SessionTreeView,
    responses=errors(404, 422, 503),
    summary="A session's status",
)
async def status(
    request: Request,
    session_id: SessionIdPath,
    tree: Annotated[
        bool, Query(description="Add the whole tree of sub-sessions and its summed usage.")
    ] = False,
    depth: Annotated[
        int | None, Query(ge=0, le=64, description="With `tree`: levels of children to show.")
    ] = None,
) -> JSONResponse:
    """The session's status, output or error, stream position and sub-session references; with
    `tree=true`, also every descendant (`tree`) and the usage of them all (`treeUsage`)."""
    runtime = runtime_of(request)
    view = await (
        runtime.status_tree(session_id, depth=depth) if tree else runtime.status(session_id)
    )
    body = view.model_dump(by_alias=True)
    if body["queuePosition"] is None:
        del body["queuePosition"]  # only a queued background session has a place
    return JSONResponse(body)


@router.post(
    "/interrupt/{session_id}",
    status_code=202,
    response_model=InterruptResponse,
    responses={
        200: {"model": InterruptResponse, "description": "Not running: no change."},
        **errors(404, 413, 415, 422, 503),
    },
    summary="Interrupt a session and its running children",
)
async def interrupt(
    request: Request,
    session_id: SessionIdPath,
    body: Annotated[InterruptRequest | None, Body()] = None,
) -> JSONResponse:
    """Stop the session and every running descendant, wherever they run (202). Idempotent; a
    session that is not running is left as it is (200)."""
    reason = body.reason if body is not None else None
    status = await runtime_of(request).interrupt(session_id, reason)
    requested = status == "running"
    answer = InterruptResponse(session_id=session_id, status=status, interrupt_requested=requested)
    return JSONResponse(answer.model_dump(by_alias=True), status_code=202 if requested else 200)


@router.post(
    "/resume/{session_id}",
    response_model=StartResponse,
    responses=errors(404, 409, 413, 415, 422, 503),
    summary="Resume or continue a session",
)
async def resume(
    request: Request,
    session_id: SessionIdPath,
    body: Annotated[ResumeRequest | None, Body()] = None,
) -> JSONResponse:
    """Resume an interrupted session from its last committed step, or continue a finished one
    with a new `message`; 409 while it runs."""
    body = body or ResumeRequest()
    runtime = runtime_of(request)
    handle = await runtime.resume(
        session_id,
        body.message,
        tool_results=body.tool_results,
        approvals=body.approvals,
    )
    record = await runtime.store.get_session(handle.session_id)
    return _answer(record, 200)
