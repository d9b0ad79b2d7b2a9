"""Records to rows and back: the only code that knows how a record is laid out in the tables.

Rows come back from the drivers by position, in the tables' column order. JSON columns arrive
decoded from PostgreSQL (asyncpg's codec) and as text from SQLite; bodies are wire JSON text.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pydantic_core

from app.protocol import MESSAGE_ADAPTER, Chunk, Message, RemoteRef, SubSessionRef
from app.protocol.chunks import BaseChunk, chunk_from_json, chunk_to_json
from app.store.records import SessionRecord
from app.store.sql.tables import sessions, sub_session_refs

SESSION_COLUMNS = tuple(str(column.name) for column in sessions.columns)
"""The sessions table's columns, in order (plain `str`: SQLAlchemy's names are a subclass that
JSON encoders take a slow path for)."""

if tuple(field.name for field in dataclasses.fields(SessionRecord)) != SESSION_COLUMNS:
    raise RuntimeError("The sessions table's columns no longer follow SessionRecord's fields")

UPDATED_COLUMNS = tuple(
    name for name in SESSION_COLUMNS if name not in ("session_id", "owner_id", "lease_expires_at")
)
"""What an update writes: everything but the key and the lease, which only the lease calls own."""

JSON_COLUMNS = ("state", "input", "output")
"""The sessions columns holding JSON."""

_JSON_POSITIONS = tuple(SESSION_COLUMNS.index(name) for name in JSON_COLUMNS)
_REF_COLUMNS = {str(column.name): index for index, column in enumerate(sub_session_refs.columns)}


def json_text(value: Any) -> str:
    """`value` as JSON text (None as JSON null, as SQLAlchemy's JSON type stores it)."""
    return pydantic_core.to_json(value).decode()


def session_row(record: SessionRecord) -> dict[str, Any]:
    """The sessions row for a new record, JSON fields as text."""
    # The record's __dict__ holds its fields in the columns' order (its __init__ and `evolve`
    # keep the fields' order, checked against the columns above): copying it costs a tenth of
    # reading the fields one by one.
    row = record.__dict__.copy()
    for name in JSON_COLUMNS:
        row[name] = json_text(row[name])
    return row


def session_update_row(record: SessionRecord) -> dict[str, Any]:
    """The parameters of an update: `b_session_id` plus the columns an update may write."""
    row = session_row(record)
    row["b_session_id"] = record.session_id
    return row


def session_from_row(values: Sequence[Any], *, json_as_text: bool) -> SessionRecord:
    """The record a sessions row holds (`json_as_text` where the driver did not decode JSON)."""
    fields = list(values)
    if json_as_text:
        for position in _JSON_POSITIONS:
            if fields[position] is not None:
                fields[position] = pydantic_core.from_json(fields[position])
    return SessionRecord(*fields)


def message_body(message: Message) -> str:
    """A message's stored JSON (the model's own serialiser: what the union's gives, without
    finding the member first)."""
    return message.__pydantic_serializer__.to_json(message, by_alias=True).decode()


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


def ref_from_row(values: Sequence[Any]) -> SubSessionRef:
    """The ref a sub_session_refs row holds."""
    column = _REF_COLUMNS
    remote_stream_id = values[column["remote_stream_id"]]
    remote = (
        None
        if remote_stream_id is None
        else RemoteRef(
            stream_id=remote_stream_id, last_sequence=values[column["remote_last_sequence"]]
        )
    )
    return SubSessionRef(
        sub_session_id=values[column["sub_session_id"]],
        agent_type=values[column["agent_type"]],
        parent_tool_call_id=values[column["parent_tool_call_id"]],
        status=values[column["status"]],
        started_at=values[column["started_at"]],
        completed_at=values[column["completed_at"]],
        mode=values[column["mode"]],
        name=values[column["name"]],
        remote=remote,
        completion_delivered=bool(values[column["completion_delivered"]]),
    )
