"""The standard clients' own entry points: the AI SDK's chat transport (`useChat`) and AG-UI's
`HttpAgent`. Each starts, continues or answers a session, then streams its protocol's view of
the turn; the chat id or thread id is the session id.

- A new id starts the agent with the last user message (without one there is no chat to
  continue: a 404).
- A stopped session continues with it (an interrupted one resumes from its checkpoint).
- A session paused for the client takes the answers: the AI SDK's tool parts with an output or
  an approval response, AG-UI's `resume` entries (or `tool` messages) for the pending calls.

What a session's state does not allow (it runs, it is a sub-agent, it runs another agent, it
finished and no message continues it) is a 409, as for `/resume`: the same body may fit later.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request, Response
from sse_starlette import EventSourceResponse

from app.agents.agent import AGENT_NAME_PATTERN
from app.api.deps import runtime_of
from app.api.documented import Responses, errors
from app.api.routes.protocols import VIEW_ERRORS, ag_ui_answer, ai_sdk_answer, serve_view
from app.api.routing import ApiRoute
from app.errors import (
    AgentMismatchError,
    InvalidRequestError,
    SessionNotFoundError,
    SessionNotResumableError,
    SessionRunningError,
    StreamNotFoundError,
)
from app.protocol import STOPPED_STATUSES, Chunk, SessionStatus
from app.protocol.ag_ui import AgUiView
from app.protocol.ai_sdk import DONE, HEADERS, UIMessageView
from app.protocol.api import PendingCall
from app.protocol.ui_requests import ChatRequest, RunAgentInput, content_text, text_of
from app.protocol.values import SessionId
from app.runtime import AgentRuntime
from app.store import SessionRecord

router = APIRouter(tags=["protocols"], route_class=ApiRoute)

CHAT_ERRORS: Responses = errors(
    404,
    409,
    413,
    415,
    422,
    503,
    meaning={
        404: "Unknown agent type; or no session has the id and the last message is no user "
        "message to start one with (`session_not_found`).",
        409: "The session runs (`session_running`), runs another agent (`agent_mismatch`), is "
        "a sub-agent, or has finished and the last message is no user message to continue it "
        "with (`session_not_resumable`); or a concurrent turn started it first "
        "(`session_exists`).",
        422: "Invalid body, or answers that do not fit the calls the session waits for.",
    },
)
"""The errors of a turn of a chat or a thread."""


async def pending_calls(runtime: AgentRuntime, record: SessionRecord) -> dict[str, PendingCall]:
    """The calls a paused tree waits for, by the id its views give them: a call's own id in
    the root, `{sessionId}/{toolCallId}` below it."""
    status = await runtime.status(record.session_id)
    return {
        call.tool_call_id
        if call.session_id == record.session_id
        else f"{call.session_id}/{call.tool_call_id}": call
        for call in status.pending_calls
    }


async def last_sequence(runtime: AgentRuntime, stream_id: str) -> int:
    """How far the stream has got (0 before it exists)."""
    try:
        return (await runtime.store.get_stream(stream_id)).last_sequence
    except StreamNotFoundError:
        return 0


async def existing(runtime: AgentRuntime, session_id: str, agent_type: str) -> SessionRecord | None:
    """The session, if it exists; `AgentMismatchError` if it runs another agent than
    `agent_type`, which must exist (else `AgentNotFoundError`)."""
    runtime.registry.get(agent_type)
    try:
        record = await runtime.store.get_session(session_id)
    except SessionNotFoundError:
        return None
    if record.agent_type != agent_type:
        raise AgentMismatchError(
            f"Session {session_id!r} runs {record.agent_type!r}, not {agent_type!r}"
        )
    return record


async def run_turn(
    runtime: AgentRuntime,
    record: SessionRecord | None,
    session_id: str,
    agent_type: str,
    message: str,
    answers: tuple[list[dict[str, Any]], list[dict[str, Any]]],
) -> None:
    """Start, continue, resume or answer the session, as its status asks."""
    results, approvals = answers
    if record is None:
        if not message:
            raise SessionNotFoundError(
                f"No session {session_id!r} to continue: a new one starts with a user message"
            )
        await runtime.execute(agent_type, message, session_id=session_id)
        return
    if not record.is_root:
        raise SessionNotResumableError(
            f"Session {session_id!r} is a sub-agent: talk to its root {record.stream_id!r}"
        )
    status: SessionStatus = record.status
    if status not in STOPPED_STATUSES:
        raise SessionRunningError(f"Session {session_id!r} is {status}")
    if status == "paused_awaiting_client":
        await runtime.resume(session_id, tool_results=results, approvals=approvals)
    elif status == "interrupted":
        await runtime.resume(session_id)
    else:
        if not message:
            raise SessionNotResumableError(
                f"Session {session_id!r} is {status}: continue it with a user message"
            )
        await runtime.resume(session_id, message)


# -- AI SDK ----------------------------------------------------------------------------------


def chat_answers(
    body: ChatRequest, waiting: dict[str, PendingCall]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The answers in the last assistant message's tool parts, for the calls that wait."""
    results: list[dict[str, Any]] = []
    approvals: list[dict[str, Any]] = []
    assistant = next((m for m in reversed(body.messages) if m.role == "assistant"), None)
    for part in assistant.parts if assistant is not None else []:
        call_id = part.get("toolCallId")
        call = waiting.get(call_id) if isinstance(call_id, str) else None
        if call is None:
            continue
        state = part.get("state")
        if call.reason == "client" and state == "output-available":
            results.append(_answer(call, result=part.get("output")))
        elif call.reason == "client" and state == "output-error":
            results.append(_answer(call, result={"error": part.get("errorText")}))
        elif call.reason == "approval" and state in ("approval-responded", "output-denied"):
            approval = part.get("approval")
            approved = isinstance(approval, dict) and approval.get("approved") is True
            approvals.append(_answer(call, approved=approved))
    return results, approvals


def _answer(call: PendingCall, **answer: Any) -> dict[str, Any]:
    """An answer to `call`, as `POST /resume` takes it."""
    return {"sessionId": call.session_id, "toolCallId": call.tool_call_id, **answer}


@router.post(
    "/ai-sdk/chat",
    response_class=EventSourceResponse,
    responses={200: ai_sdk_answer("The turn as an AI SDK UI message stream."), **CHAT_ERRORS},
    summary="Chat with an agent through the AI SDK's transport",
)
async def ai_sdk_chat(request: Request, body: ChatRequest) -> EventSourceResponse:
    """The `api` of `new DefaultChatTransport({api, body: {agentType}})` for `useChat`: starts
    the chat's session, continues it with the last user message, or answers its pending client
    tools and approvals from the last assistant message; answers with the turn's stream."""
    runtime = runtime_of(request)
    record = await existing(runtime, body.id, body.agent_type)
    last = body.messages[-1] if body.messages else None
    message = text_of(last.parts) if last is not None and last.role == "user" else ""
    answers: tuple[list[dict[str, Any]], list[dict[str, Any]]] = ([], [])
    message_id = f"{body.id}-{await last_sequence(runtime, body.id)}"
    if record is not None and record.status == "paused_awaiting_client":
        answers = chat_answers(body, await pending_calls(runtime, record))
        # The answers continue the assistant message that asked.
        if last is not None and last.role == "assistant":
            message_id = last.id
    before = await last_sequence(runtime, body.id)
    await run_turn(runtime, record, body.id, body.agent_type, message, answers)
    return await serve_view(
        request,
        body.id,
        before,
        lambda _type: UIMessageView(body.id, message_id=message_id),
        headers=HEADERS,
        last=b"data: " + DONE.encode() + b"\n\n",
    )


def turn_start(chunks: list[Chunk], root_id: str) -> int:
    """The sequence after which the current turn's chunks begin: after the root's last ending
    (output, error, interrupt or pause) before the stream's end."""
    start = 0
    for chunk in chunks[:-1]:
        if chunk.agent_id == root_id and chunk.type in (
            "output",
            "error",
            "interrupted",
            "tool_pending",
        ):
            start = chunk.sequence
    return start


@router.get(
    "/ai-sdk/chat/{chat_id}/stream",
    response_class=EventSourceResponse,
    responses={
        200: ai_sdk_answer("The running turn from its start, as an AI SDK UI message stream."),
        204: {"description": "No turn is running: nothing to resume."},
        **VIEW_ERRORS,
    },
    summary="Resume the chat's running turn (useChat's resume)",
)
async def ai_sdk_resume(
    request: Request,
    chat_id: Annotated[SessionId, Path(description="The chat's id.")],
) -> Response:
    """What `useChat({resume: true})` asks on load: the running turn replayed from its start
    (the client rebuilds the message from it), or 204 when the session is not running."""
    runtime = runtime_of(request)
    try:
        stream = await runtime.store.get_stream(chat_id)
    except StreamNotFoundError:
        return Response(status_code=204)
    if stream.status in STOPPED_STATUSES:
        return Response(status_code=204)
    chunks = await runtime.store.read_chunks(chat_id, limit=stream.last_sequence + 1)
    before = turn_start(chunks, chat_id)
    return await serve_view(
        request,
        chat_id,
        before,
        lambda _type: UIMessageView(chat_id, message_id=f"{chat_id}-{before}"),
        headers=HEADERS,
        last=b"data: " + DONE.encode() + b"\n\n",
    )


# -- AG-UI -----------------------------------------------------------------------------------


def ag_ui_answers(
    body: RunAgentInput, waiting: dict[str, PendingCall]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The answers to the pending calls in `resume` entries, else in `tool` messages."""
    results: list[dict[str, Any]] = []
    approvals: list[dict[str, Any]] = []
    for entry in body.resume or []:
        call = waiting.get(entry.interrupt_id)
        if call is None:
            raise InvalidRequestError(f"No pending call has the id {entry.interrupt_id!r}")
        if call.reason == "approval":
            payload = entry.payload
            if isinstance(payload, dict):
                payload = payload.get("approved")
            approved = entry.status == "resolved" and payload is not False
            approvals.append(_answer(call, approved=approved))
        else:
            result = entry.payload if entry.status == "resolved" else {"cancelled": True}
            results.append(_answer(call, result=result))
    if not body.resume:
        for message in body.messages:
            call = waiting.get(message.tool_call_id or "") if message.role == "tool" else None
            if call is not None and call.reason == "client":
                results.append(_answer(call, result=content_text(message.content)))
    return results, approvals


@router.post(
    "/ag-ui/{agent_type}",
    response_class=EventSourceResponse,
    responses={200: ag_ui_answer("The run as AG-UI events."), **CHAT_ERRORS},
    summary="Run an agent as an AG-UI agent (HttpAgent)",
)
async def ag_ui_run(
    request: Request,
    agent_type: Annotated[
        str, Path(pattern=AGENT_NAME_PATTERN, description="The registered agent to run.")
    ],
    body: RunAgentInput,
) -> EventSourceResponse:
    """The `url` of `new HttpAgent({url, threadId})`: starts the thread's session of
    `agentType` with the last user message, continues it, or answers its interrupts (`resume`);
    with `forwardedProps.fromSequence` it only follows the thread after that sequence."""
    runtime = runtime_of(request)
    record = await existing(runtime, body.thread_id, agent_type)
    follow_from = body.forwarded_props.from_sequence if body.forwarded_props else None
    if follow_from is not None:
        if record is None:
            raise SessionNotFoundError(f"No thread {body.thread_id!r} to follow")
        before = follow_from
    else:
        last = body.messages[-1] if body.messages else None
        message = content_text(last.content) if last is not None and last.role == "user" else ""
        answers: tuple[list[dict[str, Any]], list[dict[str, Any]]] = ([], [])
        if record is not None and record.status == "paused_awaiting_client":
            answers = ag_ui_answers(body, await pending_calls(runtime, record))
        before = await last_sequence(runtime, body.thread_id)
        await run_turn(runtime, record, body.thread_id, agent_type, message, answers)
    return await serve_view(
        request,
        body.thread_id,
        before,
        lambda root_type: AgUiView(
            body.thread_id, root_type, thread_id=body.thread_id, run_id=body.run_id
        ),
    )
