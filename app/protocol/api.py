"""HTTP API bodies: what clients send and what the server answers."""

from __future__ import annotations

from typing import Any, Literal, Self

from pydantic import ConfigDict, Field, model_validator

from app.protocol._base import Json, WireModel
from app.protocol.session import SessionStatus, SubSessionRef
from app.protocol.values import JsonObject, JsonValue, SessionId, Text


class RequestModel(WireModel):
    """A body a client sends: its camelCase keys and nothing else (the document says
    `additionalProperties: false`, and snake_case spellings are not accepted either)."""

    model_config = ConfigDict(validate_by_name=False, validate_by_alias=True)


class UsageView(WireModel):
    """Tokens the session's model calls used, summed."""

    input_tokens: int = 0
    """Prompt tokens, over every model call of the session."""
    output_tokens: int = 0
    """Completion tokens, over every model call of the session."""


class PendingCall(WireModel):
    """A call somewhere in a paused tree that waits for the client."""

    session_id: str
    """The session that made the call (the root's own, or a descendant's)."""
    tool_call_id: str
    """The call's id."""
    tool_name: str
    """The tool called."""
    arguments: dict[str, Any] | str
    """The call's arguments."""
    reason: Literal["client", "approval"]
    """`client`: it waits for the client tool's result; `approval`: for a decision."""


class SessionStatusView(WireModel):
    """A session's status, as `GET /status/{sessionId}` and `AgentRuntime.status` give it."""

    session_id: str
    """The session's id."""
    agent_type: str
    """The agent it runs."""
    status: SessionStatus
    """Its lifecycle status."""
    step_count: int
    """Steps taken in the current turn."""
    output: Json = None
    """The final output, once completed."""
    error: str | None = None
    """Why it failed, if it did."""
    failure_reason: str | None = None
    """`parent_suspended` when it failed because its parent suspended, `timeout` when it ran
    out of time."""
    queue_position: int | None = None
    """For a `queued` background session only (absent otherwise): how many queued before it
    wait for a slot (0: it starts next)."""
    stream_id: str
    """The stream its chunks go to (its root's)."""
    last_sequence: int = 0
    """The last committed sequence of that stream."""
    parent_session_id: str | None = None
    """The parent session, for a sub-agent."""
    sub_sessions: list[SubSessionRef] = Field(default_factory=list)
    """Its children."""
    usage: UsageView = Field(default_factory=UsageView)
    """Model tokens used."""
    pending_calls: list[PendingCall] = Field(default_factory=list)
    """For a paused session: every call of its tree that waits for the client (its own, its
    children's, at any depth, on this server or another); answer them with `POST /resume`."""


_MESSAGE_OR_INPUT: dict[str, Any] = {
    "anyOf": [
        {"required": ["message"], "properties": {"message": {"type": "string"}}},
        {"required": ["input"], "properties": {"input": {"type": "object"}}},
    ]
}
"""What `StartRequest._needs_a_message_or_an_input` checks, as JSON Schema."""


class StartRequest(RequestModel):
    """`POST /start`: a `message`, an `input`, or both."""

    model_config = ConfigDict(json_schema_extra=_MESSAGE_OR_INPUT)

    agent_type: Text
    """The registered agent to run (`GET /agents` lists them)."""
    message: Text | None = None
    """The first user message; derived from `input` when absent."""
    input: JsonObject | None = None
    """Structured input: it must fit the agent's input schema (`GET /agents`), becomes the
    message when none is given, and seeds the agent's custom state."""
    session_id: SessionId | None = None
    """The session id to use; generated when absent."""
    parent_session_id: SessionId | None = None
    """The calling session, when another agent server delegates to this one: a session this
    server stores, or the one `sessionId` names as its parent in the remote-child form
    `{parentSessionId}-remote-{callId}`. Anything else is a 404."""

    @model_validator(mode="after")
    def _needs_a_message_or_an_input(self) -> Self:
        if self.message is None and self.input is None:
            raise ValueError("a run needs a `message` or an `input`")
        return self


class StartResponse(WireModel):
    """The answer to `POST /start` and `POST /resume`."""

    session_id: str
    """The session's id."""
    stream_id: str
    """Where to follow it: `GET /stream/{streamId}`."""
    status: SessionStatus
    """Its status now."""
    agent_type: str
    """The agent it runs."""


class ToolResultBody(RequestModel):
    """A client tool's result."""

    session_id: SessionId | None = None
    """The session that made the call (the `sessionId` of its pending call; its `tool_pending`
    chunk's `agentId`): one below the resumed session in its tree. Default: that session."""
    tool_call_id: Text
    """The id of the call it answers (from its `tool_pending` chunk)."""
    result: JsonValue = None
    """What the tool returned, as JSON."""


class ApprovalBody(RequestModel):
    """A decision on a call that needs approval."""

    session_id: SessionId | None = None
    """The session that made the call, as for a tool result. Default: the resumed session."""
    tool_call_id: Text
    """The id of the call it decides (from its `tool_pending` chunk)."""
    approved: bool
    """Whether the call may run; a refusal reaches the model as a tool error."""


class ResumeRequest(RequestModel):
    """`POST /resume/{sessionId}`: nothing to resume an interrupted session, a `message` to
    continue a finished one, or the answers a paused one waits for."""

    message: Text | None = None
    """A new user message: continues a finished session with a new turn."""
    tool_results: list[ToolResultBody] | None = None
    """Results of the client tools the session waits for."""
    approvals: list[ApprovalBody] | None = None
    """Decisions on the calls the session waits to have approved."""


class InterruptRequest(RequestModel):
    """`POST /interrupt/{sessionId}`."""

    reason: Text | None = None
    """Why; carried by the `interrupted` chunk."""


class InterruptResponse(WireModel):
    """The answer to `POST /interrupt/{sessionId}`."""

    session_id: str
    """The session's id."""
    status: SessionStatus
    """The session's status when the interrupt arrived."""
    interrupt_requested: bool
    """Whether the session was running, so the interrupt was taken; else nothing changed."""


class AgentInfo(WireModel):
    """A registered agent, as `GET /agents` lists it."""

    name: str
    """Its name: the `agentType` that starts it."""
    description: str
    """What it does."""
    input_schema: dict[str, Any] | None = None
    """The JSON schema of the `input` its callers give it, when a sub-agent tool declares one."""
    output_schema: dict[str, Any]
    """The JSON schema of its output (a string for agents that answer in text)."""
    tools: list[str] = Field(default_factory=list)
    """The tools it may call."""


class ErrorDetail(WireModel):
    """What went wrong."""

    code: str
    """A stable machine-readable code."""
    message: str
    """A human-readable explanation."""
    details: list[dict[str, Any]] | None = None
    """Per-field problems, for invalid requests: each with `loc` (where: `body`, `query`,
    `header` or `path`, then the field's path) and `msg`."""


class ErrorBody(WireModel):
    """Every 4xx and 5xx answer."""

    error: ErrorDetail
    """The error: its stable code, a message and, for invalid requests, the details."""


class StreamEnd(WireModel):
    """The data of a stream's last message, `event: end`."""

    status: SessionStatus
    """The status the run stopped with."""
