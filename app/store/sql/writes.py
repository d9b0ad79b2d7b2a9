"""Applies write batches inside one open transaction, with the contract's conflict rules.

Several batches are applied together as if one after another. One query first reads everything
the rules depend on (which sessions and keys exist, each session's next message index, each
stream's last sequence), under a lock that keeps it true until the commit: a SQLite writer holds
the database's write lock from `BEGIN IMMEDIATE`, and on PostgreSQL the streams' rows are read
`FOR UPDATE`. The rules are then checked in Python, in the in-memory store's order, before
anything is written; rows of one kind from every batch then go out in one executemany, in
arrival order. Unique keys remain the last line of defence against another process's writer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.errors import SessionExistsError, SessionNotFoundError
from app.protocol import STOPPED_STATUSES
from app.store.base import WriteBatch
from app.store.sql.driver import RawConnection
from app.store.sql.queries import (
    CHECK_EXISTING_KEY,
    CHECK_EXISTING_SESSION,
    CHECK_LAST_SEQUENCE,
    CHECK_NEXT_MESSAGE,
    STREAM_CHANNEL,
    Queries,
)
from app.store.sql.rows import chunk_body, message_body, ref_row, session_row, session_update_row


def stream_change_payload(origin: str, stream_id: str, sequence: int | str, status: str) -> str:
    """A stream notification: `<origin> <last sequence or -> <new status or -> <stream id>`."""
    return f"{origin} {sequence} {status} {stream_id}"


def batch_size(batch: WriteBatch) -> int:
    """How many rows the batch writes, roughly: what bounds a group's size."""
    return (
        len(batch.new_sessions)
        + len(batch.updated_sessions)
        + len(batch.cleared_messages)
        + len(batch.messages)
        + len(batch.refs)
        + sum(len(append.chunks) for append in batch.chunks)
        + len(batch.streams)
    )


class _Known:
    """What the database holds that the rules depend on."""

    def __init__(self, rows: Sequence[Sequence[Any]]) -> None:
        self.sessions: set[str] = set()
        self.keys: set[str] = set()
        self.next_message: dict[str, int] = {}
        self.last_sequence: dict[str, int] = {}
        for kind, key, value in rows:
            if kind == CHECK_EXISTING_SESSION:
                self.sessions.add(key)
            elif kind == CHECK_EXISTING_KEY:
                self.keys.add(key)
            elif kind == CHECK_NEXT_MESSAGE:
                self.next_message[key] = value
            elif kind == CHECK_LAST_SEQUENCE:
                self.last_sequence[key] = value


class BatchWriter:
    """Writes batches through the statements of one backend."""

    def __init__(self, queries: Queries, *, origin: str) -> None:
        self._q = queries
        self._origin = origin
        self._notify = queries.backend == "postgresql"

    async def apply(
        self, conn: RawConnection, batches: Sequence[WriteBatch], *, now: int
    ) -> set[str]:
        """Write `batches` in order in `conn`'s open transaction; returns the streams touched.

        Raises the first rule broken (the transaction must then be rolled back); which batch
        broke it is only exact when `batches` holds one.
        """
        q = self._q
        known = _Known(
            await conn.fetch(
                q.check,
                {
                    "sessions": q.ids(
                        record.session_id
                        for batch in batches
                        for record in (*batch.new_sessions, *batch.updated_sessions)
                    ),
                    "keys": q.ids(
                        record.idempotency_key for batch in batches for record in batch.new_sessions
                    ),
                    "messages": q.ids({a.session_id for b in batches for a in b.messages}),
                    "streams": q.ids({a.stream_id for b in batches for a in b.chunks}),
                },
            )
        )
        new_sessions = self._new_sessions(batches, known)
        updates = self._updates(batches, known)
        cleared, new_messages = self._messages(batches, known)
        new_chunks, advanced = self._chunks(batches, known)

        if new_sessions:
            await conn.many(q.insert_sessions, new_sessions)
        if updates:
            await conn.many(q.update_sessions, updates)
        if cleared:
            await conn.execute(q.clear_messages, {"ids": q.ids(sorted(cleared))})
        if new_messages:
            await conn.insert(q.insert_messages, new_messages)
        refs = {
            (upsert.parent_session_id, upsert.ref.sub_session_id): upsert
            for batch in batches
            for upsert in batch.refs
        }
        if refs:
            rows = [ref_row(upsert.parent_session_id, upsert.ref) for upsert in refs.values()]
            await conn.many(q.upsert_refs, rows)
        if advanced:
            await conn.many(q.advance_streams, advanced)
        if new_chunks:
            await conn.insert(q.insert_chunks, new_chunks)
        touched = {row["stream_id"]: (row["last_sequence"], "-") for row in advanced}
        statuses = {update.stream_id: update.status for b in batches for update in b.streams}
        if statuses:
            await conn.many(
                q.upsert_stream_status,
                [
                    {
                        "stream_id": stream_id,
                        "status": status,
                        "stopped_at": now if status in STOPPED_STATUSES else None,
                    }
                    for stream_id, status in statuses.items()
                ],
            )
            for stream_id, status in statuses.items():
                touched[stream_id] = (touched.get(stream_id, ("-", "-"))[0], status)
        if touched and self._notify:
            payloads = [
                stream_change_payload(self._origin, stream_id, sequence, status)
                for stream_id, (sequence, status) in sorted(touched.items())
            ]
            await conn.fetch(q.notify, {"channel": STREAM_CHANNEL, "payloads": payloads})
        return set(touched)

    def _new_sessions(self, batches: Sequence[WriteBatch], known: _Known) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for batch in batches:
            for record in batch.new_sessions:
                if record.session_id in known.sessions:
                    raise SessionExistsError(f"Session {record.session_id!r} already exists")
                key = record.idempotency_key
                if key is not None:
                    if key in known.keys:
                        raise SessionExistsError(
                            f"A session with idempotency key {key!r} already exists"
                        )
                    known.keys.add(key)
                known.sessions.add(record.session_id)
                rows.append(session_row(record))
        return rows

    def _updates(self, batches: Sequence[WriteBatch], known: _Known) -> list[dict[str, Any]]:
        # Sequential semantics: a session created by a later batch of the group is missing
        # for an earlier one.
        existing = set(known.sessions) - {
            record.session_id for batch in batches for record in batch.new_sessions
        }
        rows: list[dict[str, Any]] = []
        for batch in batches:
            existing.update(record.session_id for record in batch.new_sessions)
            for record in batch.updated_sessions:
                if record.session_id not in existing:
                    raise SessionNotFoundError(f"Session {record.session_id!r} not found")
                rows.append(session_update_row(record))
        return rows

    def _messages(
        self, batches: Sequence[WriteBatch], known: _Known
    ) -> tuple[set[str], list[dict[str, Any]]]:
        """The conversations to clear first, and the messages to insert after.

        A batch's `cleared_messages` restart those conversations at index 0; earlier batches'
        messages for them would be deleted by it, so they are never written.
        """
        following = known.next_message
        cleared: set[str] = set()
        rows: list[dict[str, Any]] = []
        for batch in batches:
            if batch.cleared_messages:
                restarted = set(batch.cleared_messages)
                cleared |= restarted
                following.update(dict.fromkeys(restarted, 0))
                rows = [row for row in rows if row["session_id"] not in restarted]
            for append in batch.messages:
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
        return cleared, rows

    def _chunks(
        self, batches: Sequence[WriteBatch], known: _Known
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        lasts = known.last_sequence
        rows: list[dict[str, Any]] = []
        advanced: dict[str, int] = {}
        for batch in batches:
            for append in batch.chunks:
                last = lasts.get(append.stream_id, 0)
                for chunk in append.chunks:
                    if chunk.sequence != last + 1:
                        raise SessionExistsError(
                            f"Chunk {chunk.sequence} of stream {append.stream_id!r} does not "
                            f"follow {last}"
                        )
                    last = chunk.sequence
                    rows.append(
                        {"stream_id": append.stream_id, "sequence": last, "body": chunk_body(chunk)}
                    )
                lasts[append.stream_id] = last
                advanced[append.stream_id] = last
        return rows, [
            {"stream_id": stream_id, "last_sequence": last}
            for stream_id, last in sorted(advanced.items())
        ]
