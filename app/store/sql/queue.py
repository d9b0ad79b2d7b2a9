"""The background queue on SQL (`background_queue`): a batch's queue changes, and the claims,
reads and counts of `StateStore`'s queue methods.

Claims are serialised across processes, so the running rows never exceed a cap: on PostgreSQL
by a transaction-scoped advisory lock (`QUEUE_LOCK_KEY`), taken first by every claim and by every
write transaction that changes the queue, so the statements after it read what the previous
holder committed, and rows get their seq in the order they become visible; on SQLite by the
database's write lock (`BEGIN IMMEDIATE`). A claim runs on a connection of its own, not through
the group committer: it holds no row lock a batch could wait for while holding the queue's lock.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, delete, func, literal_column, select, text, update
from sqlalchemy.sql.elements import ColumnElement

from app.errors import SessionNotFoundError
from app.store.base import QueueEntry
from app.store.records import WriteBatch
from app.store.sql.compiling import among_ids, compile_for, dialect_for
from app.store.sql.driver import ConnectionPool, DriverSql, RawConnection
from app.store.sql.engines import Backend, translate_errors
from app.store.sql.tables import background_queue

QUEUE_LOCK_KEY = 0x5A_67_51_75
"""The PostgreSQL advisory lock that serialises claims and queue writes across processes."""

_COLUMNS = (
    "session_id",
    "stream_id",
    "parent_session_id",
    "state",
    "seq",
    "timeout_ms",
    "enqueued_at",
    "started_at",
)
"""`QueueEntry`'s fields, in order: the columns a read selects."""


@dataclass(frozen=True, slots=True)
class QueueSql:
    """The queue's statements, compiled for one backend's driver."""

    lock: DriverSql | None
    """PostgreSQL: take the queue's lock until the transaction ends."""
    insert: DriverSql
    move: DriverSql
    remove: DriverSql
    running: DriverSql
    heads: DriverSql
    claim: DriverSql
    entry: DriverSql
    position: DriverSql
    stream: DriverSql
    counts: DriverSql


@functools.cache
def queue_sql(backend: Backend) -> QueueSql:
    """The queue's statements of `backend`, compiled once per process."""
    dialect = dialect_for(backend)
    pg = backend == "postgresql"
    c = background_queue.c

    def driver(statement: Any) -> DriverSql:
        return compile_for(statement, dialect)

    def among(column: Any, name: str) -> ColumnElement[bool]:
        return among_ids(backend, column, name)

    queued = c.state == literal_column("'queued'")
    columns = [c[name] for name in _COLUMNS]
    inserted = ", ".join(name for name in _COLUMNS if name != "seq")
    ahead = background_queue.alias("ahead")
    return QueueSql(
        lock=DriverSql(f"SELECT pg_advisory_xact_lock({QUEUE_LOCK_KEY})", ()) if pg else None,
        insert=driver(
            text(
                f"INSERT INTO background_queue ({inserted}) VALUES "
                f"({', '.join(':' + name for name in _COLUMNS if name != 'seq')}) "
                "ON CONFLICT (session_id) DO NOTHING"
            )
        ),
        move=driver(
            update(background_queue)
            .where(c.session_id == bindparam("b_session_id"))
            .values(state=bindparam("state"))
        ),
        remove=driver(delete(background_queue).where(among(c.session_id, "ids"))),
        running=driver(select(func.count()).where(c.state == literal_column("'running'"))),
        heads=driver(
            select(c.session_id)
            .where(queued)
            .order_by(c.seq)
            .limit(bindparam("free"))
            .offset(literal_column("0"))
        ),
        claim=driver(
            update(background_queue)
            .where(among(c.session_id, "ids"))
            .where(queued)
            .values(state=literal_column("'running'"), started_at=bindparam("now"))
            .returning(c.session_id, c.seq)
        ),
        entry=driver(select(*columns).where(c.session_id == bindparam("session_id"))),
        position=driver(
            select(
                select(func.count())
                .where(ahead.c.state == literal_column("'queued'"))
                .where(ahead.c.seq < c.seq)
                .scalar_subquery()
            )
            .where(c.session_id == bindparam("session_id"))
            .where(queued)
        ),
        stream=driver(
            select(*columns).where(c.stream_id == bindparam("stream_id")).order_by(c.seq)
        ),
        counts=driver(select(c.state, func.count()).group_by(c.state)),
    )


def _ids(backend: Backend, values: Iterable[str]) -> list[str] | str:
    listed = list(values)
    return listed if backend == "postgresql" else json.dumps(listed)


async def lock_queue(conn: RawConnection, backend: Backend) -> None:
    """Take the queue's lock for `conn`'s open transaction (PostgreSQL; a SQLite writer holds
    the database's lock already). Take it before any other lock: a claim waits for nothing
    else, so whoever holds it never waits for a claim."""
    lock = queue_sql(backend).lock
    if lock is not None:
        await conn.execute(lock, {})


async def write_queue(
    conn: RawConnection, backend: Backend, batches: Sequence[WriteBatch], present: Collection[str]
) -> None:
    """Each batch's queue changes in `conn`'s open transaction, in order (see `WriteBatch`):
    removals, inserts (for sessions in `present`, else `SessionNotFoundError`), moves."""
    sql = queue_sql(backend)
    for batch in batches:
        if batch.dequeued:
            await conn.execute(sql.remove, {"ids": _ids(backend, batch.dequeued)})
        rows: list[dict[str, Any]] = []
        for entry in batch.enqueued:
            if entry.session_id not in present:
                raise SessionNotFoundError(f"Session {entry.session_id!r} not found")
            rows.append({name: getattr(entry, name) for name in _COLUMNS})
        if rows:
            await conn.many(sql.insert, rows)
        if batch.queue_moves:
            moves = [{"b_session_id": m.session_id, "state": m.state} for m in batch.queue_moves]
            await conn.many(sql.move, moves)


class SqlQueue:
    """The queue's claims and reads for one `SqlStore`, on its connections."""

    def __init__(self, connections: Callable[[], ConnectionPool], backend: Backend) -> None:
        self._connections = connections
        self._backend: Backend = backend
        self._sql = queue_sql(backend)

    async def claim(self, cap: int, candidates: Collection[str], now: int) -> list[str]:
        """See `StateStore.claim_queued`: in a transaction holding the queue's lock."""
        if not candidates or cap <= 0:
            return []
        sql = self._sql
        with translate_errors("claim queued sessions"):
            async with self._connections().acquire() as conn, conn.transaction():
                await lock_queue(conn, self._backend)
                ((running,),) = await conn.fetch(sql.running, {})
                free = cap - running
                if free <= 0:
                    return []
                heads = await conn.fetch(sql.heads, {"free": free})
                mine = [session_id for (session_id,) in heads if session_id in candidates]
                if not mine:
                    return []
                params = {"ids": _ids(self._backend, mine), "now": now}
                claimed = await conn.fetch(sql.claim, params)
        return [session_id for session_id, _ in sorted(claimed, key=lambda row: row[1])]

    async def entry(self, session_id: str) -> QueueEntry | None:
        """See `StateStore.queue_entry`."""
        rows = await self._fetch(self._sql.entry, {"session_id": session_id})
        return QueueEntry(*rows[0]) if rows else None

    async def position(self, session_id: str) -> int | None:
        """See `StateStore.queue_position`."""
        rows = await self._fetch(self._sql.position, {"session_id": session_id})
        return int(rows[0][0]) if rows else None

    async def stream(self, stream_id: str) -> list[QueueEntry]:
        """See `StateStore.list_queue`."""
        rows = await self._fetch(self._sql.stream, {"stream_id": stream_id})
        return [QueueEntry(*row) for row in rows]

    async def counts(self) -> tuple[int, int]:
        """See `StateStore.queue_counts`."""
        counts = dict(await self._fetch(self._sql.counts, {}))
        return int(counts.get("queued", 0)), int(counts.get("running", 0))

    async def _fetch(self, statement: DriverSql, params: dict[str, Any]) -> list[Any]:
        with translate_errors("read the background queue"):
            async with self._connections().acquire() as conn:
                return await conn.fetch(statement, params)
