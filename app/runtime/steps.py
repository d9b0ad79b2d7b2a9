"""The writes of a session's steps, as plain functions over values: the record a step leaves,
the messages it appends, and what a conversation already holds.

A step is one atomic write (see docs/architecture.md, "The life of a step"): these functions
build its parts; the session's loop decides when to write them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from app.models import Usage
from app.protocol import (
    AssistantMessage,
    Message,
    SessionStatus,
    SubSessionRef,
)
from app.protocol.values import MAX_SEQUENCE, clean_json
from app.store import MessageAppend, SessionRecord


def dump_state(state: BaseModel | dict[str, Any]) -> dict[str, Any]:
    """A session's custom state as the JSON a store holds."""
    data = state.model_dump(mode="json") if isinstance(state, BaseModel) else dict(state)
    return clean_json(data)  # type: ignore[no-any-return]


def added_usage(total: Usage, call: Usage) -> Usage:
    """`total` with one model call's usage added (a store holds at most 64 bits of it)."""
    return Usage(
        min(total.input_tokens + max(call.input_tokens, 0), MAX_SEQUENCE),
        min(total.output_tokens + max(call.output_tokens, 0), MAX_SEQUENCE),
    )


def stepped(
    record: SessionRecord,
    *,
    step_count: int,
    state: dict[str, Any],
    usage: Usage,
    now: int,
    **changes: Any,
) -> SessionRecord:
    """The session's record once a step (or its end) has landed."""
    return record.evolve(
        step_count=step_count,
        state=state,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        updated_at=now,
        **changes,
    )


def appended(session_id: str, start: int, messages: Sequence[Message]) -> list[MessageAppend]:
    """`messages` appended to a conversation that holds `start` of them."""
    return [
        MessageAppend(session_id, start + offset, message)
        for offset, message in enumerate(messages)
    ]


def ended_ref(ref: SubSessionRef, status: SessionStatus, now: int) -> SubSessionRef:
    """A child's ref once the child has stopped with `status`."""
    return ref.replaced({"status": status, "completed_at": now})


def responses_and_call_ids(messages: Sequence[Message]) -> tuple[int, set[str]]:
    """How many model responses a conversation holds, and every tool-call id they used."""
    responses = 0
    call_ids: set[str] = set()
    for message in messages:
        if isinstance(message, AssistantMessage):
            responses += 1
            call_ids.update(call.id for call in message.tool_calls if call.id)
    return responses, call_ids


def new_record(
    agent_type: str,
    session_id: str,
    *,
    stream_id: str,
    state: dict[str, Any],
    input: Any,
    now: int,
    **fields: Any,
) -> SessionRecord:
    """A session about to be created, running (a root's own stream is its id; a local child's
    its root's)."""
    return SessionRecord(
        session_id=session_id,
        agent_type=agent_type,
        stream_id=stream_id,
        status="running",
        created_at=now,
        updated_at=now,
        state=state,
        input=input,
        **fields,
    )
