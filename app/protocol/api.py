"""HTTP API bodies (DESIGN.md section 5): what clients send and what the server answers."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from app.protocol._base import Json, WireModel
from app.protocol.session import SessionStatus, SubSessionRef


class UsageView(WireModel):
    """Tokens the session's model calls used, summed."""

    input_tokens: int = 0
    output_tokens: int = 0


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
    """`parent_suspended` when it failed because its parent suspended."""
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


class StartRequest(WireModel):
    """`POST /start`."""

    agent_type: str
    """The registered agent to run."""
    message: str | None = None
    """The first user message."""
    input: dict[str, Any] | None = None
    """Structured input; becomes the message when none is given, and seeds the custom state."""
    session_id: str | None = None
    """The session id to use; generated when absent."""
    parent_session_id: str | None = None
    """The calling session, when another agent server delegates to this one."""


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


class ToolResultBody(WireModel):
    """A client tool's result."""

    tool_call_id: str
    result: Json = None


class ApprovalBody(WireModel):
    """A decision on a call that needs approval."""

    tool_call_id: str
    approved: bool


class ResumeRequest(WireModel):
    """`POST /resume/{sessionId}`."""

    message: str | None = None
    """A new user message: continues a finished session with a new turn."""
    tool_results: list[ToolResultBody] | None = None
    """Results of the client tools the session waits for."""
    approvals: list[ApprovalBody] | None = None
    """Decisions on the calls the session waits to have approved."""


class InterruptRequest(WireModel):
    """`POST /interrupt/{sessionId}`."""

    reason: str | None = None
    """Why; carried by the `interrupted` chunk."""


class InterruptResponse(WireModel):
    """The answer to `POST /interrupt/{sessionId}`."""

    session_id: str
    status: SessionStatus
    """The session's status when the interrupt arrived."""
    interrupt_requested: bool
    """Whether the session was running, so the interrupt was taken; else nothing changed."""


class AgentInfo(WireModel):
    """A registered agent, as `GET /agents` lists it."""

    name: str
    description: str
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
    """Per-field problems, for invalid bodies."""


class ErrorBody(WireModel):
    """Every 4xx and 5xx answer."""

    error: ErrorDetail
