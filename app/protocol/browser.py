"""Bodies of the browser-facing API: stream tokens, session listings,
conversations and the whole tree's status."""

from __future__ import annotations

from pydantic import Field

from app.protocol._base import Json, WireModel
from app.protocol.api import SessionStatusView
from app.protocol.messages import Message
from app.protocol.session import RefMode, RemoteRef, SessionStatus


class StreamToken(WireModel):
    """The answer to `POST /stream/{streamId}/token`."""

    stream_id: str
    """The one stream the token opens (and its protocol views)."""
    token: str
    """Pass it as `?token=` to `GET /stream/{streamId}` where an `EventSource` cannot send the
    API key."""
    expires_at: int
    """When it stops opening new connections (ms since epoch); an open stream stays open."""


class UsageTotals(WireModel):
    """Tokens used by model calls, summed."""

    input_tokens: int = 0
    """Tokens sent to the models."""
    output_tokens: int = 0
    """Tokens the models produced."""


class SessionSummary(WireModel):
    """A root session, as `GET /sessions` lists it."""

    session_id: str
    """The session's id."""
    agent_type: str
    """The agent it runs."""
    status: SessionStatus
    """Its lifecycle status."""
    created_at: int
    """When it was started (ms since epoch)."""
    updated_at: int
    """When its record last changed (ms since epoch)."""
    step_count: int
    """Steps taken in its current turn."""
    stream_id: str
    """Where to follow it."""
    parent_session_id: str | None = None
    """The calling session on another server, when one started it."""
    error: str | None = None
    """Why it failed, if it did."""
    usage: UsageTotals = Field(default_factory=UsageTotals)
    """Tokens the root session's own model calls used (its tree's: `/status?tree=true`)."""


class SessionPage(WireModel):
    """One page of `GET /sessions`, newest first."""

    sessions: list[SessionSummary]
    """The sessions of this page, newest first."""
    next_cursor: str | None = None
    """Pass it as `?cursor=` for the next page; null on the last page."""


class ConversationMessage(WireModel):
    """One stored message with its position in the conversation."""

    index: int
    """0-based position."""
    message: Message
    """The message as the model reads it: `user`, `assistant` (text and tool calls) or `tool`."""


class ConversationPage(WireModel):
    """`GET /sessions/{sessionId}/messages`: a session's conversation as stored."""

    session_id: str
    """The session's id."""
    messages: list[ConversationMessage]
    """The messages of this page, in conversation order."""
    next_offset: int | None = None
    """Pass it as `?offset=` for the next page; null when this page reaches the end."""


class TreeNode(WireModel):
    """One session of a tree, with its children (`GET /status/{id}?tree=true`)."""

    session_id: str
    """The session's id."""
    agent_type: str
    """The agent it runs."""
    status: SessionStatus
    """Its lifecycle status."""
    step_count: int = 0
    """Steps taken in its current turn."""
    output: Json = None
    """Its final output, once completed."""
    error: str | None = None
    """Why it failed, if it did."""
    failure_reason: str | None = None
    """`parent_suspended` when it failed because its parent suspended."""
    parent_tool_call_id: str | None = None
    """The parent's call that started it (null for the tree's top)."""
    mode: RefMode = "ephemeral"
    """`ephemeral` for sub-agent tool calls, `persistent` for companion-managed children."""
    name: str | None = None
    """A persistent child's name."""
    remote: RemoteRef | None = None
    """For a child on another server: its stream there (its own tree is not expanded)."""
    usage: UsageTotals = Field(default_factory=UsageTotals)
    """This session's own model usage."""
    children: list[TreeNode] = Field(default_factory=list)
    """Its children, in the order they started; empty past the requested depth."""
    truncated: bool = False
    """Whether it has children that `depth` left out."""


class SessionTreeView(SessionStatusView):
    """`GET /status/{sessionId}?tree=true`: the status, plus the session's whole tree of
    sub-sessions and the tree's summed usage."""

    tree: TreeNode
    """The session and its descendants, to the requested depth."""
    tree_usage: UsageTotals
    """Tokens used by every session of the tree on this server, at any depth (a remote child's
    own usage is on its server)."""
