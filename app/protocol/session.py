"""Session statuses and the sub-session references served by `/status`."""

from __future__ import annotations

from typing import Literal

from app.protocol._base import WireModel

SessionStatus = Literal[
    "queued",
    "running",
    "completed",
    "failed",
    "interrupted",
    "terminated",
    "paused_awaiting_client",
]
"""A session's lifecycle status."""

STOPPED_STATUSES: frozenset[str] = frozenset(
    {"completed", "failed", "terminated", "interrupted", "paused_awaiting_client"}
)
"""Statuses in which no run is in progress: a stream in one of them ends."""

RefMode = Literal["ephemeral", "persistent", "background"]
"""How a sub-session lives: one tool call (`ephemeral`), across calls (`persistent`), or on
its own from a `subagent` call with `background` (`background`)."""


class RemoteRef(WireModel):
    """Where a remote child's stream is, and how far its parent has copied it."""

    stream_id: str
    """The stream id on the remote server."""
    last_sequence: int = 0
    """The last remote sequence committed into the parent's stream."""


class SubSessionRef(WireModel):
    """A parent's reference to one of its child sessions, stored apart from the parent's state."""

    sub_session_id: str
    """The child's session id."""
    agent_type: str
    """The child's agent type."""
    parent_tool_call_id: str
    """The parent's tool call that started the child."""
    status: SessionStatus
    """The child's status as the parent last recorded it."""
    started_at: int
    """When the child started (ms since epoch)."""
    completed_at: int | None = None
    """When the child stopped (ms since epoch), if it has."""
    mode: RefMode = "ephemeral"
    """`ephemeral` for sub-agent tool calls, `persistent` for companion-managed children,
    `background` for background `subagent` sessions."""
    name: str | None = None
    """The persistent child's name."""
    remote: RemoteRef | None = None
    """For remote children, their stream and the last sequence copied."""
    completion_delivered: bool = False
    """Whether the child's completion has been delivered to the parent."""
