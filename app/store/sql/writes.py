"""Applies write batches with the contract's conflict rules.

Several batches are applied together as if one after another, and their net effect is planned
(a session created and updated in one group is inserted once in its final form).

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

from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from app.errors import (
    LeaseLostError,
    SessionExistsError,
    SessionNotFoundError,
    WriteConflictError,
)
from app.protocol import STOPPED_STATUSES
from app.store.records import StoredChunk, WriteBatch
from app.store.sql.driver import RawConnection
from app.store.sql.queries import (
    CHECK_EXISTING_KEY,
    CHECK_EXISTING_SESSION,
    CHECK_LAST_SEQUENCE,
    CHECK_NEXT_MESSAGE,
    QUEUE_CHANNEL,
    STREAM_CHANNEL,
    Queries,
)
from app.store.sql.queue import lock_queue, write_queue
from app.store.sql.rows import chunk_body, message_body, ref_row, session_row, session_update_row

NOTIFY_PAYLOAD_LIMIT = 7_900
"""Bytes a notification's payload stays under (PostgreSQL refuses 8,000 or more)."""


def stream_change_payloads(
    origin: str, changes: Iterable[tuple[str, tuple[int | str, str]]]
) -> list[str]:
    """The notifications of a group's stream changes (stream id, then its last sequence and new
    status, "-" where unchanged), as few as fit: `<origin>`, then one line per stream,
    `<sequence> <status> <stream id>` (all ASCII; stream ids hold no space or newline). One
    notification per group, not per stream: every listening process, this one included,
    handles each notification it is sent."""
    payloads: list[str] = []
    lines = [origin]
    size = len(origin)
    for stream_id, (sequence, status) in changes:
        line = f"{sequence} {status} {stream_id}"
        if size + 1 + len(line) > NOTIFY_PAYLOAD_LIMIT and len(lines) > 1:
            payloads.append("\n".join(lines))
            lines, size = [origin], len(origin)
        lines.append(line)
        size += 1 + len(line)
    if len(lines) > 1:
        payloads.append("\n".join(lines))
    return payloads


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


@dataclass(slots=True)
class Plan:
    """The net rows a group writes, table by table, in arrival order."""

    new_sessions: dict[str, dict[str, Any]] = field(default_factory=dict)
    updates: dict[str, dict[str, Any]] = field(default_factory=dict)
    cleared: set[str] = field(default_factory=set)
    messages: list[dict[str, Any]] = field(default_factory=list)
    refs: list[dict[str, Any]] = field(default_factory=list)
    chunks: list[dict[str, Any]] = field(default_factory=list)
    advanced: dict[str, int] = field(default_factory=dict)
    statuses: dict[str, dict[str, Any]] = field(default_factory=dict)
    releases: dict[str, str] = field(default_factory=dict)
    """Leases given up (`WriteBatch.release`), by session, with the owner giving them up."""

    def touched(self) -> set[str]:
        """The streams the plan advances or changes the status of."""
        return set(self.advanced) | set(self.statuses)

    def written(self, streams: Container[str]) -> dict[str, tuple[list[StoredChunk], Any]]:
        """For the streams it touches that are in `streams`: the chunks the plan stores there,
        in order, and the status it sets (None if it sets none)."""
        written: dict[str, tuple[list[StoredChunk], Any]] = {
            stream_id: ([], row["status"] if (row := self.statuses.get(stream_id)) else None)
            for stream_id in self.touched()
            if stream_id in streams
        }
        if written:
            for row in self.chunks:
                entry = written.get(row["stream_id"])
                if entry is not None:
                    entry[0].append((row["sequence"], row["body"]))
        return written

    def payloads(self, origin: str) -> list[str]:
        """The stream notifications the group sends."""
        touched: dict[str, tuple[int | str, str]] = {
            stream_id: (last, "-") for stream_id, last in self.advanced.items()
        }
        for stream_id, row in self.statuses.items():
            touched[stream_id] = (touched.get(stream_id, ("-", "-"))[0], row["status"])
        return stream_change_payloads(origin, sorted(touched.items()))


def _expectations(batches: Sequence[WriteBatch]) -> tuple[_Known, dict[str, Any]]:
    """What `batches` take the database to hold, as the planner's knowledge (under which they
    are consistent among themselves) and as the parameters of the statement's guard checks
    (`pg_write.GUARD_CHECKS`), those with something to check: every session they create absent,
    every other one they update present, and each conversation and stream continuing at their
    first message and chunk."""
    created: set[str] = set()
    updated: list[str] = []
    keys: list[str] = []
    expected = _Known(())
    for batch in batches:
        for record in batch.new_sessions:
            created.add(record.session_id)
            if record.idempotency_key is not None:
                keys.append(record.idempotency_key)
        for record in batch.updated_sessions:
            if record.session_id not in created:
                updated.append(record.session_id)
        for append in batch.messages:
            expected.next_message.setdefault(append.session_id, append.index)
        for chunk_append in batch.chunks:
            if chunk_append.chunks:
                first = chunk_append.chunks[0].sequence - 1
                expected.last_sequence.setdefault(chunk_append.stream_id, first)
    expected.sessions = set(updated)
    guard: dict[str, Any] = {}
    if created:
        guard["g_new"] = sorted(created)
    if keys:
        guard["g_keys"] = keys
    if updated:
        guard["g_updated"] = sorted(set(updated))
    if expected.next_message:
        guard["g_messages"] = orjson.dumps(
            [{"session_id": s, "idx": i} for s, i in expected.next_message.items()]
        ).decode()
    if expected.last_sequence:
        guard["g_streams"] = orjson.dumps(
            [{"stream_id": s, "last": n} for s, n in expected.last_sequence.items()]
        ).decode()
    owners = {r.session_id: r.owner_id for b in batches for r in b.new_sessions}
    _check_fences([b for b in batches if b.fence and b.fence[0] in owners], {}, owners)
    fences = _fences(batches, created)
    if fences:
        guard["g_owners"] = orjson.dumps(
            [{"session_id": s, "owner_id": o} for s, o in fences.items()]
        ).decode()
    return expected, guard


def _fences(batches: Sequence[WriteBatch], created: Container[str]) -> dict[str, str]:
    """The leases the batches require (`WriteBatch.fence`) of sessions they do not create:
    the owner each must have. (A session a batch creates holds its record's lease.)"""
    fences: dict[str, str] = {}
    for batch in batches:
        if batch.fence is not None and batch.fence[0] not in created:
            fences[batch.fence[0]] = batch.fence[1]
    return fences


def _check_fences(
    batches: Sequence[WriteBatch], holders: dict[str, str | None], created: dict[str, str | None]
) -> None:
    """Raise `LeaseLostError` unless every fence of `batches` holds: `holders` are the owners in
    the database, `created` those of the sessions the batches create."""
    for batch in batches:
        if batch.fence is None:
            continue
        session_id, owner_id = batch.fence
        holder = created[session_id] if session_id in created else holders.get(session_id)
        if holder != owner_id:
            raise LeaseLostError(f"The lease of session {session_id!r} is not held by {owner_id!r}")


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
            fenced = list(_fences(batches, created))
            owners = await conn.fetch(q.owners, {"ids": q.ids(fenced)}) if fenced else []
            _check_fences(batches, {session_id: owner for session_id, owner in owners}, created)
        known = _Known(rows)
        plan = self._plan(batches, known, now)
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
        expected, guard = _expectations(batches)
        plan = self._plan(batches, expected, now)
        return plan if await self._write_postgres(conn, plan, guard) else None

    def _plan(self, batches: Sequence[WriteBatch], known: _Known, now: int) -> Plan:
        plan = Plan()
        self._plan_sessions(batches, known, plan)
        self._plan_messages(batches, known, plan)
        self._plan_chunks(batches, known, plan)
        refs = {
            (upsert.parent_session_id, upsert.ref.sub_session_id): upsert
            for batch in batches
            for upsert in batch.refs
        }
        plan.refs = [ref_row(upsert.parent_session_id, upsert.ref) for upsert in refs.values()]
        for batch in batches:
            for update in batch.streams:
                plan.statuses[update.stream_id] = {
                    "stream_id": update.stream_id,
                    "status": update.status,
                    "stopped_at": now if update.status in STOPPED_STATUSES else None,
                }
        return plan

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

    def _plan_sessions(self, batches: Sequence[WriteBatch], known: _Known, plan: Plan) -> None:
        created: dict[str, int] = {}
        for position, batch in enumerate(batches):
            for record in batch.new_sessions:
                if record.session_id in known.sessions or record.session_id in created:
                    raise SessionExistsError(f"Session {record.session_id!r} already exists")
                key = record.idempotency_key
                if key is not None:
                    if key in known.keys:
                        raise SessionExistsError(
                            f"A session with idempotency key {key!r} already exists"
                        )
                    known.keys.add(key)
                created[record.session_id] = position
                plan.new_sessions[record.session_id] = session_row(record)
        for position, batch in enumerate(batches):
            for record in batch.updated_sessions:
                session_id = record.session_id
                created_in = created.get(session_id)
                if created_in is None and session_id not in known.sessions:
                    raise SessionNotFoundError(f"Session {session_id!r} not found")
                if created_in is not None and created_in > position:
                    # Sequential semantics: a later batch's session is missing for this one.
                    raise SessionNotFoundError(f"Session {session_id!r} not found")
                if created_in is None:
                    plan.updates[session_id] = session_update_row(record)
                else:
                    inserted = plan.new_sessions[session_id]
                    row = session_row(record)
                    row["owner_id"] = inserted["owner_id"]
                    row["lease_expires_at"] = inserted["lease_expires_at"]
                    plan.new_sessions[session_id] = row
        for batch in batches:
            if batch.release and batch.fence is not None:
                session_id, owner_id = batch.fence
                new_row = plan.new_sessions.get(session_id)
                if new_row is None:
                    plan.releases[session_id] = owner_id
                else:
                    new_row["owner_id"] = new_row["lease_expires_at"] = None

    def _plan_messages(self, batches: Sequence[WriteBatch], known: _Known, plan: Plan) -> None:
        # A batch's `cleared_messages` restart those conversations at index 0; the earlier
        # batches' messages for them would be deleted by it, so they are never written.
        following = known.next_message
        for batch in batches:
            if batch.cleared_messages:
                restarted = set(batch.cleared_messages)
                plan.cleared |= restarted
                following.update(dict.fromkeys(restarted, 0))
                plan.messages = [m for m in plan.messages if m["session_id"] not in restarted]
            for append in batch.messages:
                expected = following.get(append.session_id, 0)
                if append.index != expected:
                    raise WriteConflictError(
                        f"Message {append.index} of session {append.session_id!r} conflicts: "
                        f"the next index is {expected}"
                    )
                following[append.session_id] = expected + 1
                plan.messages.append(
                    {
                        "session_id": append.session_id,
                        "idx": append.index,
                        "body": message_body(append.message),
                    }
                )

    def _plan_chunks(self, batches: Sequence[WriteBatch], known: _Known, plan: Plan) -> None:
        lasts = known.last_sequence
        for batch in batches:
            for append in batch.chunks:
                last = lasts.get(append.stream_id, 0)
                for chunk in append.chunks:
                    if chunk.sequence != last + 1:
                        raise WriteConflictError(
                            f"Chunk {chunk.sequence} of stream {append.stream_id!r} does not "
                            f"follow {last}"
                        )
                    last = chunk.sequence
                    plan.chunks.append(
                        {"stream_id": append.stream_id, "sequence": last, "body": chunk_body(chunk)}
                    )
                lasts[append.stream_id] = last
                plan.advanced[append.stream_id] = last
