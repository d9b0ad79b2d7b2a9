"""Session-id rules, and the deterministic ids that make restarts idempotent (DESIGN.md §7)."""

from __future__ import annotations

import hashlib
import re
import uuid

from app.errors import InvalidSessionIdError

SESSION_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,200}$"
MAX_SESSION_ID_LENGTH = 200

_SESSION_ID = re.compile(SESSION_ID_PATTERN)
_UNSAFE = re.compile(r"[^A-Za-z0-9._:-]")


def validate_session_id(session_id: str) -> str:
    """Return `session_id` if it is a valid session id, else raise `InvalidSessionIdError`."""
    if not _SESSION_ID.match(session_id):
        raise InvalidSessionIdError(
            f"Invalid session id {session_id[:80]!r}: ids match {SESSION_ID_PATTERN}"
        )
    return session_id


def new_session_id() -> str:
    """A fresh random root session id."""
    return f"s-{uuid.uuid4().hex}"


def tool_call_id(turn_index: int, call_index: int) -> str:
    """The id given to a model's tool call that came without one.

    `turn_index` counts the session's assistant messages, so ids stay unique across steps and turns
    and are the same when a step is replayed.
    """
    return f"call-{turn_index}-{call_index}"


def _child_id(parent_session_id: str, kind: str, suffix: str) -> str:
    child = f"{parent_session_id}-{kind}-{_UNSAFE.sub('_', suffix)}"
    if len(child) <= MAX_SESSION_ID_LENGTH:
        return child
    # Too deep a tree for the id limit: keep a readable head and make the rest a stable digest.
    digest = hashlib.sha256(child.encode()).hexdigest()[:32]
    return f"{child[: MAX_SESSION_ID_LENGTH - len(digest) - 1]}~{digest}".replace("~", ".")


def sub_session_id(parent_session_id: str, tool_call_id: str) -> str:
    """The id of a local sub-agent's session: `{parent}-sub-{toolCallId}`."""
    return _child_id(parent_session_id, "sub", tool_call_id)


def remote_session_id(parent_session_id: str, tool_call_id: str) -> str:
    """The id of a remote sub-agent's session: `{parent}-remote-{toolCallId}`."""
    return _child_id(parent_session_id, "remote", tool_call_id)


def persistent_session_id(parent_session_id: str, name: str) -> str:
    """The id of a persistent child's session: `{parent}-agent-{name}`."""
    return _child_id(parent_session_id, "agent", name)
