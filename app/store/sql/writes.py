"""Applies write batches inside one open transaction, with the contract's conflict rules.

Several batches are applied together as if one after another: rows of one kind from every batch
go out in one executemany, in arrival order, and each rule is checked against what the database
holds plus what the earlier batches of the group add. Checks read before they write, under a lock
that keeps them true until the commit: SQLite writers hold the database's write lock from
`BEGIN IMMEDIATE`, and on PostgreSQL the streams' rows are read `FOR UPDATE`. Primary keys on
messages and chunks are the last line of defence against a writer in another process.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from app.errors import SessionExistsError, SessionNotFoundError
from app.protocol import STOPPED_STATUSES
from app.store.base import WriteBatch
from app.store.sql.engines import translate_errors
from app.store.sql.queries import STREAM_CHANNEL, Queries
from app.store.sql.rows import (
    chunk_body,
    message_body,
    ref_row,
    session_row,
    session_update_row,
)


def batch_size(batch: WriteBatch) -> int:
    """How many rows the batch writes, roughly: what bounds a group's size."""
    return (
        len(batch.new_sessions)
        + len(batch.updated_sessions)
        + len(batch.messages)
        + len(batch.refs)
        + sum(len(append.chunks) for append in batch.chunks)
        + len(batch.streams)
    )


class BatchWriter:
    """Writes batches through the statements of one backend."""

    def __init__(self, queries: Queries, *, origin: str) -> None:
        self._q = queries
        self._origin = origin
        self._notify = queries.backend == "postgresql"

    async def apply(
        self, conn: AsyncConnection, batches: Sequence[WriteBatch], *, now: int
    ) -> set[str]:
        """Write `batches` in order in `conn`'s transaction; returns the streams touched.

        Raises the first rule broken (the transaction must then be rolled back); which batch
        broke it is only exact when `batches` holds one.
        """
        created = await self._insert_sessions(conn, batches)
        await self._update_sessions(conn, batches, created)
        await self._append_messages(conn, batches)
        await self._upsert_refs(conn, batches)
        touched = await self._append_chunks(conn, batches)
        touched |= await self._update_streams(conn, batches, now)
        if touched and self._notify:
            with translate_errors("notify listeners"):
                await conn.execute(
                    self._q.notify,
                    {"channel": STREAM_CHANNEL, "origin": self._origin, "ids": sorted(touched)},
                )
        return touched

    async def _insert_sessions(
        self, conn: AsyncConnection, batches: Sequence[WriteBatch]
    ) -> dict[str, int]:
        created: dict[str, int] = {}
        keys: set[str] = set()
        rows: list[dict[str, Any]] = []
        for position, batch in enumerate(batches):
            for record in batch.new_sessions:
                if record.session_id in created:
                    raise SessionExistsError(f"Session {record.session_id!r} already exists")
                key = record.idempotency_key
                if key is not None:
                    if key in keys:
                        raise SessionExistsError(
                            f"A session with idempotency key {key!r} already exists"
                        )
                    keys.add(key)
                created[record.session_id] = position
                rows.append(session_row(record))
        if rows:
            with translate_errors(
                "create sessions",
                conflict="A session with this id or idempotency key already exists: "
                + ", ".join(repr(row["session_id"]) for row in rows),
            ):
                await conn.execute(self._q.insert_sessions, rows)
        return created

    async def _update_sessions(
        self, conn: AsyncConnection, batches: Sequence[WriteBatch], created: dict[str, int]
    ) -> None:
        rows: list[dict[str, Any]] = []
        stored: list[str] = []
        for position, batch in enumerate(batches):
            for record in batch.updated_sessions:
                created_in = created.get(record.session_id)
                if created_in is None:
                    stored.append(record.session_id)
                elif created_in > position:
                    raise SessionNotFoundError(f"Session {record.session_id!r} not found")
                rows.append(session_update_row(record))
        if not rows:
            return
        with translate_errors("update sessions"):
            if stored:
                wanted = set(stored)
                found = set(
                    (await conn.scalars(self._q.existing_sessions, {"ids": list(wanted)})).all()
                )
                for session_id in stored:
                    if session_id not in found:
                        raise SessionNotFoundError(f"Session {session_id!r} not found")
            await conn.execute(self._q.update_sessions, rows)

    async def _append_messages(self, conn: AsyncConnection, batches: Sequence[WriteBatch]) -> None:
        appends = [append for batch in batches for append in batch.messages]
        if not appends:
            return
        with translate_errors(
            "append messages", conflict="A message was appended concurrently at the same index"
        ):
            ids = list({append.session_id for append in appends})
            result = await conn.execute(self._q.message_counts, {"ids": ids})
            following: dict[str, int] = {session_id: count for session_id, count in result}
            rows: list[dict[str, Any]] = []
            for append in appends:
                expected = following.get(append.session_id, 0)
                if append.index != expected:
                    raise SessionExistsError(
                        f"Message {append.index} of session {append.session_id!r} conflicts: "
                        f"the next index is {expected}"
                    )
                following[append.session_id] = expected + 1
                rows.append(
                    {
                        "session_id": append.session_id,
                        "idx": append.index,
                        "body": message_body(append.message),
                    }
                )
            await conn.execute(self._q.insert_messages, rows)

    async def _upsert_refs(self, conn: AsyncConnection, batches: Sequence[WriteBatch]) -> None:
        rows = [
            ref_row(upsert.parent_session_id, upsert.ref)
            for batch in batches
            for upsert in batch.refs
        ]
        if rows:
            with translate_errors("store sub-session refs"):
                await conn.execute(self._q.upsert_refs, rows)

    async def _append_chunks(
        self, conn: AsyncConnection, batches: Sequence[WriteBatch]
    ) -> set[str]:
        appends = [append for batch in batches for append in batch.chunks]
        if not appends:
            return set()
        with translate_errors(
            "append chunks", conflict="A chunk was appended concurrently at the same sequence"
        ):
            ids = sorted({append.stream_id for append in appends})
            result = await conn.execute(self._q.lock_streams, {"ids": ids})
            lasts: dict[str, int] = {stream_id: last for stream_id, last in result}
            known = set(lasts)
            rows: list[dict[str, Any]] = []
            for append in appends:
                last = lasts.get(append.stream_id, 0)
                for chunk in append.chunks:
                    if chunk.sequence != last + 1:
                        raise SessionExistsError(
                            f"Chunk {chunk.sequence} of stream {append.stream_id!r} does not "
                            f"follow {last}"
                        )
                    last = chunk.sequence
                    rows.append(
                        {
                            "stream_id": append.stream_id,
                            "sequence": last,
                            "body": chunk_body(chunk),
                        }
                    )
                lasts[append.stream_id] = last
            new = [
                {"stream_id": stream_id, "last_sequence": lasts[stream_id], "status": "running"}
                for stream_id in ids
                if stream_id not in known
            ]
            if new:
                await conn.execute(self._q.insert_streams, new)
            advanced = [
                {"b_stream_id": stream_id, "b_last_sequence": lasts[stream_id]}
                for stream_id in ids
                if stream_id in known
            ]
            if advanced:
                await conn.execute(self._q.advance_streams, advanced)
            if rows:
                await conn.execute(self._q.insert_chunks, rows)
        return set(ids)

    async def _update_streams(
        self, conn: AsyncConnection, batches: Sequence[WriteBatch], now: int
    ) -> set[str]:
        statuses = {
            update.stream_id: update.status for batch in batches for update in batch.streams
        }
        if not statuses:
            return set()
        rows = [
            {
                "stream_id": stream_id,
                "last_sequence": 0,
                "status": status,
                "stopped_at": now if status in STOPPED_STATUSES else None,
            }
            for stream_id, status in statuses.items()
        ]
        with translate_errors("update streams"):
            await conn.execute(self._q.upsert_stream_status, rows)
        return set(statuses)
