"""Session-id rules, and the deterministic ids that make restarts idempotent (see
docs/architecture.md, "Children")."""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Sequence

from app.errors import InvalidSessionIdError
from app.protocol.values import SESSION_ID_PATTERN as SESSION_ID_PATTERN

MAX_SESSION_ID_LENGTH = 200
_DIGEST_LENGTH = 32
_HEAD_LENGTH = MAX_SESSION_ID_LENGTH - _DIGEST_LENGTH - 1
"""What a shortened child id keeps of its long form, before `.` and the digest."""

# Matched whole (`fullmatch`): `re.match` with `$` let "id\n" through.
_SESSION_ID = re.compile(r"[A-Za-z0-9._:-]{1,200}")
_UNSAFE = re.compile(r"[^A-Za-z0-9._:-]")


def validate_session_id(session_id: str) -> str:
    """Return `session_id` if it is a valid session id, else raise `InvalidSessionIdError`."""
    if not isinstance(session_id, str) or not _SESSION_ID.fullmatch(session_id):
        raise InvalidSessionIdError(
            f"Invalid session id {session_id[:80]!r}: ids match {SESSION_ID_PATTERN}"
        )
    return session_id


def new_session_id() -> str:
    """A fresh random root session id."""
    return f"s-{uuid.uuid4().hex}"


CALL_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,64}$"
"""Model-given call ids the runtime keeps as they are (others are replaced)."""
_CALL_ID = re.compile(CALL_ID_PATTERN)


def tool_call_id(turn_index: int, call_index: int) -> str:
    """The id the runtime derives for a model's tool call: `call-{turn}-{index}`.

    `turn_index` counts the session's assistant messages, so ids stay unique across steps and turns
    and are the same when a step is replayed.
    """
    return f"call-{turn_index}-{call_index}"


def assign_call_ids(given: Sequence[str | None], used: set[str], turn_index: int) -> list[str]:
    """Ids for one model response's calls, unique within the session (`used` holds the session's
    earlier ids and receives these).

    A model's own id is kept when it is plain (`CALL_ID_PATTERN`) and new; a missing, reused or
    odd one is replaced by `tool_call_id(turn, index)` (with a `.n` suffix in the unlikely case a
    model used that too). Many OpenAI-compatible servers number calls `call_0`, `call_1`, ...
    afresh in every response: the ids derived from a call (child sessions, chunks, resume
    answers) must still never meet. The result depends only on the conversation and the
    response, so a replayed step gets the same ids.
    """
    ids: list[str] = []
    for index, model_id in enumerate(given):
        if model_id is not None and model_id not in used and _CALL_ID.fullmatch(model_id):
            call_id = model_id
            used.add(call_id)
        else:
            call_id = fresh_call_id(used, turn_index, index)
        ids.append(call_id)
    return ids


def fresh_call_id(used: set[str], turn_index: int, call_index: int) -> str:
    """`tool_call_id(turn_index, call_index)`, with a `.n` suffix if `used` has it; added to
    `used`."""
    call_id = base = tool_call_id(turn_index, call_index)
    suffix = 0
    while call_id in used:
        suffix += 1
        call_id = f"{base}.{suffix}"
    used.add(call_id)
    return call_id


def _child_id(parent_session_id: str, kind: str, suffix: str) -> str:
    child = f"{parent_session_id}-{kind}-{_UNSAFE.sub('_', suffix)}"
    if len(child) <= MAX_SESSION_ID_LENGTH:
        return child
    # Too deep a tree for the id limit: keep a readable head and make the rest a stable digest.
    digest = hashlib.sha256(child.encode()).hexdigest()[:_DIGEST_LENGTH]
    return f"{child[:_HEAD_LENGTH]}.{digest}"


def sub_session_id(parent_session_id: str, tool_call_id: str) -> str:
    """The id of a local sub-agent's session: `{parent}-sub-{toolCallId}`."""
    return _child_id(parent_session_id, "sub", tool_call_id)


def task_session_id(parent_session_id: str, tool_call_id: str) -> str:
    """The id of a session the `subagent` tool delegates to: `{parent}-task-{toolCallId}`."""
    return _child_id(parent_session_id, "task", tool_call_id)


def remote_session_id(parent_session_id: str, tool_call_id: str) -> str:
    """The id of a remote sub-agent's session: `{parent}-remote-{toolCallId}`."""
    return _child_id(parent_session_id, "remote", tool_call_id)


def is_remote_child_id(session_id: str, parent_session_id: str) -> bool:
    """Whether `session_id` has the form `remote_session_id(parent_session_id, ...)` gives: how
    a server that is delegated to knows a parent that lives on the calling server."""
    head = f"{parent_session_id}-remote-"
    if session_id.startswith(head) and len(session_id) > len(head):
        return True
    # The shortened form keeps only the first characters of the long one: as many as it keeps
    # of the head must agree.
    kept = min(len(head), _HEAD_LENGTH)
    return (
        len(session_id) == MAX_SESSION_ID_LENGTH
        and session_id[_HEAD_LENGTH] == "."
        and session_id[:kept] == head[:kept]
    )


def persistent_session_id(parent_session_id: str, name: str) -> str:
    """The id of a persistent child's session: `{parent}-agent-{name}`."""
    return _child_id(parent_session_id, "agent", name)
