"""Records to rows and back: the only code that knows how a record is laid out in the tables."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Row, RowMapping

from app.protocol import MESSAGE_ADAPTER, Chunk, Message, RemoteRef, SubSessionRef
from app.protocol.chunks import BaseChunk, chunk_from_json, chunk_to_json
from app.store.base import SessionRecord

SESSION_COLUMNS = (
    "session_id",
    "agent_type",
    "stream_id",
    "status",
    "created_at",
    "updated_at",
    "parent_session_id",
    "step_count",
    "state",
    "input",
    "output",
    "error",
    "failure_reason",
    "idempotency_key",
    "input_tokens",
    "output_tokens",
    "owner_id",
    "lease_expires_at",
)
"""The sessions table's columns, in `SessionRecord`'s field order."""

UPDATED_COLUMNS = tuple(
    name for name in SESSION_COLUMNS if name not in ("session_id", "owner_id", "lease_expires_at")
)
"""What an update writes: everything but the key and the lease, which only the lease calls own."""


def session_row(record: SessionRecord) -> dict[str, Any]:
    """The sessions row for a new record."""
    return {name: getattr(record, name) for name in SESSION_COLUMNS}


def session_update_row(record: SessionRecord) -> dict[str, Any]:
    """The parameters of an update: `b_session_id` plus the columns an update may write."""
    row = {name: getattr(record, name) for name in UPDATED_COLUMNS}
    row["b_session_id"] = record.session_id
    return row


def session_record(row: RowMapping) -> SessionRecord:
    """The record a sessions row holds."""
    return SessionRecord(**row)


def message_body(message: Message) -> str:
    """A message's stored JSON."""
    return MESSAGE_ADAPTER.dump_json(message, by_alias=True).decode()


def message_from_body(body: str) -> Message:
    """The message a stored body holds."""
    return MESSAGE_ADAPTER.validate_json(body)


def chunk_body(chunk: BaseChunk) -> str:
    """A chunk's stored body: its wire JSON."""
    return chunk_to_json(chunk).decode()


def chunk_from_body(body: str) -> Chunk:
    """The chunk a stored body holds."""
    return chunk_from_json(body)


def ref_row(parent_session_id: str, ref: SubSessionRef) -> dict[str, Any]:
    """The sub_session_refs row for `ref` (its position is assigned by the insert)."""
    return {
        "parent_session_id": parent_session_id,
        "b_parent_session_id": parent_session_id,
        "sub_session_id": ref.sub_session_id,
        "agent_type": ref.agent_type,
        "parent_tool_call_id": ref.parent_tool_call_id,
        "status": ref.status,
        "started_at": ref.started_at,
        "completed_at": ref.completed_at,
        "mode": ref.mode,
        "name": ref.name,
        "remote_stream_id": None if ref.remote is None else ref.remote.stream_id,
        "remote_last_sequence": None if ref.remote is None else ref.remote.last_sequence,
        "completion_delivered": ref.completion_delivered,
    }


def ref_from_row(row: Row[Any]) -> SubSessionRef:
    """The ref a sub_session_refs row holds."""
    values = row._mapping
    remote = (
        None
        if values["remote_stream_id"] is None
        else RemoteRef(
            stream_id=values["remote_stream_id"], last_sequence=values["remote_last_sequence"]
        )
    )
    return SubSessionRef(
        sub_session_id=values["sub_session_id"],
        agent_type=values["agent_type"],
        parent_tool_call_id=values["parent_tool_call_id"],
        status=values["status"],
        started_at=values["started_at"],
        completed_at=values["completed_at"],
        mode=values["mode"],
        name=values["name"],
        remote=remote,
        completion_delivered=values["completion_delivered"],
    )
