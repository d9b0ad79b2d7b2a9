"""The one SQLAlchemy schema SQLite and PostgreSQL share; the Alembic history must match it.

Chunk and message bodies are kept as their wire JSON text, exactly as `app.protocol` serialises
them: nothing is converted twice and the bytes a client reads are the bytes the runtime wrote.
The session's JSON fields are `JSON`, stored as JSONB on PostgreSQL.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects.postgresql import JSONB

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
"""Deterministic constraint names, so migrations can name what they drop on both backends."""

metadata = MetaData(naming_convention=NAMING_CONVENTION)
"""Every table of the store."""

JsonColumn = JSON().with_variant(JSONB(), "postgresql")
"""JSON on SQLite, JSONB on PostgreSQL."""

sessions = Table(
    "sessions",
    metadata,
    Column("session_id", String, primary_key=True),
    Column("agent_type", String, nullable=False),
    Column("stream_id", String, nullable=False),
    Column("status", String, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    Column("parent_session_id", String, nullable=True),
    Column("step_count", Integer, nullable=False),
    Column("state", JsonColumn, nullable=False),
    Column("input", JsonColumn, nullable=True),
    Column("output", JsonColumn, nullable=True),
    Column("error", Text, nullable=True),
    Column("failure_reason", String, nullable=True),
    Column("idempotency_key", String, nullable=True),
    Column("input_tokens", BigInteger, nullable=False),
    Column("output_tokens", BigInteger, nullable=False),
    Column("owner_id", String, nullable=True),
    Column("lease_expires_at", BigInteger, nullable=True),
    Column("request_fingerprint", String, nullable=True),
    UniqueConstraint("idempotency_key"),
    Index(None, "status", "lease_expires_at"),
    Index(None, "created_at", "session_id"),
    Index(None, "stream_id"),
)
"""One row per session; columns are `SessionRecord`'s fields."""

messages = Table(
    "messages",
    metadata,
    Column("session_id", String, nullable=False),
    Column("idx", Integer, nullable=False),
    Column("body", Text, nullable=False),
    PrimaryKeyConstraint("session_id", "idx"),
)
"""A session's conversation: `body` is the message's JSON, `idx` its 0-based position."""

sub_session_refs = Table(
    "sub_session_refs",
    metadata,
    Column("parent_session_id", String, nullable=False),
    Column("sub_session_id", String, nullable=False),
    Column("position", Integer, nullable=False),
    Column("agent_type", String, nullable=False),
    Column("parent_tool_call_id", String, nullable=False),
    Column("status", String, nullable=False),
    Column("started_at", BigInteger, nullable=False),
    Column("completed_at", BigInteger, nullable=True),
    Column("mode", String, nullable=False),
    Column("name", String, nullable=True),
    Column("remote_stream_id", String, nullable=True),
    Column("remote_last_sequence", BigInteger, nullable=True),
    Column("completion_delivered", Boolean, nullable=False),
    PrimaryKeyConstraint("parent_session_id", "sub_session_id"),
    Index(None, "parent_session_id", "position"),
)
"""`SubSessionRef`s by parent; `position` keeps the order they were first added."""

streams = Table(
    "streams",
    metadata,
    Column("stream_id", String, primary_key=True),
    Column("last_sequence", BigInteger, nullable=False),
    Column("status", String, nullable=False),
    Column("stopped_at", BigInteger, nullable=True),
    Index(None, "stopped_at"),
)
"""How far each stream has got, and when its run stopped: `stopped_at` is only for retention,
which clears it once it has deleted the stream's chunks."""

chunks = Table(
    "chunks",
    metadata,
    Column("stream_id", String, nullable=False),
    Column("sequence", BigInteger, nullable=False),
    Column("body", Text, nullable=False),
    PrimaryKeyConstraint("stream_id", "sequence"),
)
"""Stream chunks: `body` is the chunk's wire JSON."""

interrupt_flags = Table(
    "interrupt_flags",
    metadata,
    Column("session_id", String, primary_key=True),
    Column("reason", Text, nullable=True),
    Column("requested_at", BigInteger, nullable=False),
)
"""Pending interrupt requests, cleared by the check that reads them."""

inbox = Table(
    "inbox",
    metadata,
    Column("id", BigInteger().with_variant(Integer(), "sqlite"), primary_key=True),
    Column("session_id", String, nullable=False),
    Column("content", Text, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Index(None, "session_id", "id"),
)
"""Messages queued for running sessions (`InboxMessage`); `id` increases in insertion order
(an INTEGER PRIMARY KEY on SQLite, an identity column on PostgreSQL)."""

background_queue = Table(
    "background_queue",
    metadata,
    Column("seq", BigInteger().with_variant(Integer(), "sqlite"), primary_key=True),
    Column("session_id", String, nullable=False),
    Column("stream_id", String, nullable=False),
    Column("parent_session_id", String, nullable=False),
    Column("state", String, nullable=False),
    Column("timeout_ms", BigInteger, nullable=True),
    Column("enqueued_at", BigInteger, nullable=False),
    Column("started_at", BigInteger, nullable=True),
    UniqueConstraint("session_id"),
    Index(None, "state", "seq"),
    Index(None, "stream_id"),
    sqlite_autoincrement=True,
)
"""Background child sessions waiting for, or holding, a slot (`QueueEntry`), FIFO by `seq`: a
BIGSERIAL on PostgreSQL, an INTEGER PRIMARY KEY AUTOINCREMENT on SQLite (never reused, so a
row inserted after the newest one left still comes after it)."""
