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
