"""`POST /start`, `GET /status`, `POST /interrupt` and `POST /resume`."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Path, Request
from fastapi.responses import JSONResponse

from app.api.deps import runtime_of
from app.errors import SessionExistsError, SessionNotFoundError, SessionNotResumableError
from app.ids import SESSION_ID_PATTERN, validate_session_id
from app.protocol.api import (
    ErrorBody,
    InterruptRequest,
    InterruptResponse,
    ResumeRequest,
    SessionStatusView,
    StartRequest,
    StartResponse,
)
from app.runtime import AgentRuntime
from app.store import SessionRecord

router = APIRouter(tags=["sessions"])

SessionId = Annotated[str, Path(pattern=SESSION_ID_PATTERN, description="A session id.")]
ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "Unknown session or agent type."},
    409: {"model": ErrorBody, "description": "The session's state does not allow this."},
    422: {"model": ErrorBody, "description": "Invalid body or id."},
}


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
    responses={**ERRORS, 200: {"model": StartResponse, "description": "It existed already."}},
    summary="Start a session",
)
async def start(
    request: Request,
    body: Annotated[
        StartRequest,
        Body(
            openapi_examples={
                "message": {
                    "summary": "Start with a message",
                    "value": {"agentType": "coordinator", "message": "Analyse: I love it."},
                },
                "input": {
                    "summary": "Start with structured input and a chosen id",
                    "value": {
                        "agentType": "coordinator",
                        "input": {"text": "Great product."},
                        "sessionId": "demo-1",
                    },
                },
            }
        ),
    ],
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key", max_length=200)] = None,
) -> JSONResponse:
    """Start a root session of `agentType` and answer as soon as it is stored; the run goes on
    without the client. A repeated `Idempotency-Key`, or the id of a running session, answers
    200 with that session and starts nothing; the id of a stopped session is 409."""
    runtime = runtime_of(request)
    runtime.registry.get(body.agent_type)
    existing = await _existing(runtime, body, idempotency_key)
    if existing is not None:
        return existing
    try:
        handle = await runtime.execute(
            body.agent_type,
            body.message,
            input=body.input,
            session_id=body.session_id,
            parent_session_id=body.parent_session_id,
            idempotency_key=idempotency_key,
        )
    except SessionExistsError:
        # Lost a race with an identical request: answer with the session it created.
        existing = await _existing(runtime, body, idempotency_key)
        if existing is None:
            raise
        return existing
    created = StartResponse(
        session_id=handle.session_id,
        stream_id=handle.stream_id,
        status="running",
        agent_type=body.agent_type,
    )
    return JSONResponse(created.model_dump(by_alias=True), status_code=201)


async def _existing(
    runtime: AgentRuntime, body: StartRequest, idempotency_key: str | None
) -> JSONResponse | None:
    record = None
    if idempotency_key is not None:
        record = await runtime.store.find_session_by_idempotency_key(idempotency_key)
    if record is None and body.session_id is not None:
        validate_session_id(body.session_id)
        try:
            record = await runtime.store.get_session(body.session_id)
        except SessionNotFoundError:
            return None
        if record.status != "running":
            raise SessionNotResumableError(
                f"Session {body.session_id!r} exists and is {record.status}: continue it with "
                f"POST /resume/{body.session_id}"
            )
    return None if record is None else _answer(record, 200)


@router.get(
    "/status/{session_id}",
    response_model=SessionStatusView,
    responses=ERRORS,
    summary="A session's status",
)
async def status(request: Request, session_id: SessionId) -> JSONResponse:
    """The session's status, output or error, stream position and sub-session references."""
    view = await runtime_of(request).status(session_id)
    return JSONResponse(view.model_dump(by_alias=True))


@router.post(
    "/interrupt/{session_id}",
    status_code=202,
    response_model=InterruptResponse,
    responses={
        **ERRORS,
        200: {"model": InterruptResponse, "description": "Not running: no change."},
    },
    summary="Interrupt a session and its running children",
)
async def interrupt(
    request: Request,
    session_id: SessionId,
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
    responses=ERRORS,
    summary="Resume or continue a session",
)
async def resume(
    request: Request,
    session_id: SessionId,
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
