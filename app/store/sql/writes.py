"""Applies write batches with the contract's conflict rules.

Several batches are applied together as if one after another, and their net effect is planned
(in `plan`: a session created and updated in one group is inserted once in its final form).

On PostgreSQL a group is first written by one statement in a transaction of its own, guarded by
what the batches themselves expect (`apply_at_once`): their new sessions absent, the sessions
they update present, each conversation and stream continuing at their first message and chunk.
That is one round trip. Unique keys settle a race with another process's writer: the loser's
statement fails whole.

When the guard does not hold, or on SQLite, `apply` runs in a transaction: one query reads
everything the rules depend on (which sessions and keys exist, each session's next message
index, each stream's last sequence), under a lock that keeps it true until the commit (a SQLite
writer holds the database's write lock from `BEGIN IMMEDIATE`; PostgreSQL reads the streams'
rows `FOR UPDATE`), the rules are checked in Python in the in-memory store's order, so the error
names what broke, and the plan is written: by the same statement, unguarded, on PostgreSQL, by
one executemany per table on SQLite.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from app.errors import SessionNotFoundError
from app.store.records import WriteBatch
from app.store.sql.driver import RawConnection
from app.store.sql.plan import (
    Known,
    Plan,
    check_fences,
    expectations,
    plan_group,
    required_leases,
)
from app.store.sql.queries import QUEUE_CHANNEL, STREAM_CHANNEL, Queries
from app.store.sql.queue import lock_queue, write_queue


def batch_size(batch: WriteBatch) -> int:
    """How many rows the batch writes, roughly: what bounds a group's size."""
    size = (
        len(batch.new_sessions)
        + len(batch.updated_sessions)
        + len(batch.cleared_messages)
        + len(batch.messages)
        + len(batch.refs)
        + len(batch.streams)
        + len(batch.enqueued)
        + len(batch.queue_moves)
        + len(batch.dequeued)
    )
    for append in batch.chunks:
        size += len(append.chunks)
    return size


class BatchWriter:
    """Writes batches through the statements of one backend."""

    def __init__(self, queries: Queries, *, origin: str) -> None:
        self._q = queries
        self._origin = origin

    async def apply(self, conn: RawConnection, batches: Sequence[WriteBatch], *, now: int) -> Plan:
        """Write `batches` in order in `conn`'s open transaction; returns what it wrote.

        Raises the first rule broken (the transaction must then be rolled back); which batch
        broke it is only exact when `batches` holds one.
        """
        q = self._q
        queue = any(batch.changes_queue() for batch in batches)
        if queue:
            await lock_queue(conn, q.backend)
        deleted = sorted({session_id for b in batches for session_id in b.deleted_sessions})
        if deleted:
            for statement in q.delete_sessions:
                await conn.execute(statement, {"ids": q.ids(deleted)})
        sessions = [r.session_id for b in batches for r in (*b.new_sessions, *b.updated_sessions)]
        sessions += [message.session_id for b in batches for message in b.inbox]
        sessions += [entry.session_id for b in batches for entry in b.enqueued]
        keys = [r.idempotency_key for b in batches for r in b.new_sessions if r.idempotency_key]
        conversations = {a.session_id for b in batches for a in b.messages}
        streams = {a.stream_id for b in batches for a in b.chunks}
        rows: list[Any] = []
        if sessions or conversations or streams:
            check = {
                "sessions": q.ids(sessions),
                "keys": q.ids(keys),
                "messages": q.ids(conversations),
                "streams": q.ids(streams),
            }
            rows = await conn.fetch(q.check, check)
        if any(batch.fence is not None for batch in batches):
            created = {r.session_id: r.owner_id for b in batches for r in b.new_sessions}
            fenced = list(required_leases(batches, created))
            owners = await conn.fetch(q.owners, {"ids": q.ids(fenced)}) if fenced else []
            check_fences(batches, {session_id: owner for session_id, owner in owners}, created)
        known = Known(rows)
        plan = plan_group(batches, known, now)
        if q.backend == "postgresql":
            await self._write_postgres(conn, plan, None)
        else:
            await self._write_sqlite(conn, plan)
        present = known.sessions | set(plan.new_sessions)
        await self._write_inbox(conn, batches, present, now)
        if queue:
            await write_queue(conn, q.backend, batches, present)
            if q.backend == "postgresql" and any(batch.may_free_slot() for batch in batches):
                # Delivered on commit, so a claimant woken by it sees the slot free.
                params = {"channel": QUEUE_CHANNEL, "payloads": [self._origin]}
                await conn.fetch(q.notify, params)
        return plan

    async def _write_inbox(
        self, conn: RawConnection, batches: Sequence[WriteBatch], present: set[str], now: int
    ) -> None:
        """Each batch's inbox changes, in order: what it took leaves, what it queued joins
        (for a session that exists once the batches are written)."""
        for batch in batches:
            for take in batch.inbox_taken:
                params = {"session_id": take.session_id, "through": take.through}
                await conn.execute(self._q.take_inbox, params)
            for queue in batch.inbox:
                if queue.session_id not in present:
                    raise SessionNotFoundError(f"Session {queue.session_id!r} not found")
                row = {"session_id": queue.session_id, "content": queue.content, "created_at": now}
                await conn.execute(self._q.queue_inbox, row)

    async def apply_at_once(
        self, conn: RawConnection, batches: Sequence[WriteBatch], *, now: int
    ) -> Plan | None:
        """PostgreSQL, outside a transaction: write `batches` in one statement that first checks
        the database is as they expect (one round trip in all); returns what it wrote, or
        None when it wrote nothing: the database differs from what they expect, or they clear a
        conversation, delete sessions or change an inbox or the queue. `apply` in a transaction
        then writes them or says which rule they break.
        """
        if any(
            batch.cleared_messages or batch.inbox or batch.inbox_taken or batch.changes_queue()
            for batch in batches
        ):
            return None
        expected, guard = expectations(batches)
        plan = plan_group(batches, expected, now)
        return plan if await self._write_postgres(conn, plan, guard) else None

    async def _write_postgres(
        self, conn: RawConnection, plan: Plan, guard: dict[str, Any] | None
    ) -> bool:
        """Write the plan in one statement (after clearing conversations); with `guard`, only
        if the database meets it. Whether it wrote."""
        q = self._q
        if plan.cleared:
            await conn.execute(q.clear_messages, {"ids": q.ids(sorted(plan.cleared))})
        advanced = [
            {"stream_id": stream_id, "last_sequence": last}
            for stream_id, last in plan.advanced.items()
            if stream_id not in plan.statuses
        ]
        statuses = [
            {**row, "last_sequence": plan.advanced.get(stream_id)}
            for stream_id, row in plan.statuses.items()
        ]
        params: dict[str, Any] = {
            "channel": STREAM_CHANNEL,
            "payloads": plan.payloads(self._origin),
            **(guard or {}),
        }
        parts: set[str] = set()
        for prefix, rows in (
            ("n_", list(plan.new_sessions.values())),
            ("u_", list(plan.updates.values())),
            ("m_", plan.messages),
            ("r_", plan.refs),
            ("c_", plan.chunks),
            ("a_", advanced),
            ("s_", statuses),
        ):
            if rows:
                parts.add(prefix)
                # Most of a group's bytes are message and chunk bodies, JSON text escaped once
                # more here: orjson does that several times faster than pydantic_core.
                params[prefix + "rows"] = orjson.dumps(rows).decode()
        if plan.releases:
            parts.add("l_")
            params["l_ids"] = sorted(plan.releases)
        if not (parts or params["payloads"]):
            return True
        statement = q.write_all(frozenset(parts), frozenset(guard or ()))
        (wrote, _notified), *_ = await conn.fetch(statement, params)
        return bool(wrote)

    async def _write_sqlite(self, conn: RawConnection, plan: Plan) -> None:
        q = self._q
        if plan.new_sessions:
            await conn.many(q.insert_sessions, list(plan.new_sessions.values()))
        if plan.updates:
            await conn.many(q.update_sessions, list(plan.updates.values()))
        if plan.cleared:
            await conn.execute(q.clear_messages, {"ids": q.ids(sorted(plan.cleared))})
        if plan.messages:
            await conn.many(q.insert_messages, plan.messages)
        if plan.refs:
            await conn.many(q.upsert_refs, plan.refs)
        if plan.advanced:
            advanced = [{"stream_id": s, "last_sequence": n} for s, n in plan.advanced.items()]
            await conn.many(q.advance_streams, advanced)
        if plan.chunks:
            await conn.many(q.insert_chunks, plan.chunks)
        if plan.statuses:
            await conn.many(q.upsert_stream_status, list(plan.statuses.values()))
        for session_id, owner_id in plan.releases.items():
            await conn.execute(q.release, {"b_session_id": session_id, "b_owner_id": owner_id})
