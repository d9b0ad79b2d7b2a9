"""State stores: one `StateStore` interface; in-memory, SQLite and PostgreSQL implementations."""

from __future__ import annotations

from app.errors import DefinitionError
from app.store.base import DatabaseTimeouts, QueueEntry, QueueMove, QueueState, StateStore, now_ms
from app.store.memory import MemoryStore
from app.store.records import (
    ChunkAppend,
    InboxAppend,
    InboxMessage,
    InboxTake,
    InterruptFlag,
    MessageAppend,
    RefUpsert,
    SessionCursor,
    SessionRecord,
    StreamState,
    StreamUpdate,
    WriteBatch,
)


def create_store(database_url: str, *, timeouts: DatabaseTimeouts | None = None) -> StateStore:
    """The store `database_url` names, unopened: use it as `async with create_store(url) as store`.

    `memory://` keeps everything in this process; `sqlite+aiosqlite:///path` and
    `postgresql+asyncpg://...` open a SQL database and migrate it to the current schema on entry.
    `timeouts` bound how long PostgreSQL may take to connect and to run a statement.
    """
    if database_url.startswith("memory:"):
        return MemoryStore()
    if database_url.startswith(("sqlite+aiosqlite:", "postgresql+asyncpg:")):
        from app.store.sql import SqlStore

        return SqlStore(database_url, timeouts=timeouts)
    raise DefinitionError(
        f"Unsupported database URL {database_url.split(':', 1)[0]!r}: use memory://, "
        "sqlite+aiosqlite:///path or postgresql+asyncpg://user@host/db"
    )


__all__ = [
    "ChunkAppend",
    "DatabaseTimeouts",
    "InboxAppend",
    "InboxMessage",
    "InboxTake",
    "InterruptFlag",
    "MemoryStore",
    "MessageAppend",
    "QueueEntry",
    "QueueMove",
    "QueueState",
    "RefUpsert",
    "SessionCursor",
    "SessionRecord",
    "StateStore",
    "StreamState",
    "StreamUpdate",
    "WriteBatch",
    "create_store",
    "now_ms",
]
