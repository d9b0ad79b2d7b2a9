"""What a group of batches writes, checked against the contract's rules, without I/O."""

from __future__ import annotations

from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from app.errors import LeaseLostError, SessionExistsError, SessionNotFoundError, WriteConflictError
from app.protocol import STOPPED_STATUSES
from app.store.records import StoredChunk, WriteBatch
from app.store.sql.queries import (
    CHECK_EXISTING_KEY,
    CHECK_EXISTING_SESSION,
    CHECK_LAST_SEQUENCE,
    CHECK_NEXT_MESSAGE,
)
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


class Known:
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


def expectations(batches: Sequence[WriteBatch]) -> tuple[Known, dict[str, Any]]:
    """What `batches` take the database to hold, as the planner's knowledge (under which they
    are consistent among themselves) and as the parameters of the statement's guard checks
    (`pg_write.GUARD_CHECKS`), those with something to check: every session they create absent,
    every other one they update present, and each conversation and stream continuing at their
    first message and chunk."""
    created: set[str] = set()
    updated: list[str] = []
    keys: list[str] = []
    expected = Known(())
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
    check_fences([b for b in batches if b.fence and b.fence[0] in owners], {}, owners)
    fences = required_leases(batches, created)
    if fences:
        guard["g_owners"] = orjson.dumps(
            [{"session_id": s, "owner_id": o} for s, o in fences.items()]
        ).decode()
    return expected, guard


def required_leases(batches: Sequence[WriteBatch], created: Container[str]) -> dict[str, str]:
    """The leases the batches require (`WriteBatch.fence`) of sessions they do not create:
    the owner each must have. (A session a batch creates holds its record's lease.)"""
    fences: dict[str, str] = {}
    for batch in batches:
        if batch.fence is not None and batch.fence[0] not in created:
            fences[batch.fence[0]] = batch.fence[1]
    return fences


def check_fences(
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


def plan_group(batches: Sequence[WriteBatch], known: Known, now: int) -> Plan:
    """The net rows `batches` write, applied one after another over what the database holds
    (`known`, which planning advances); raises the first rule they break."""
    plan = Plan()
    _plan_sessions(batches, known, plan)
    _plan_messages(batches, known, plan)
    _plan_chunks(batches, known, plan)
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


def _plan_sessions(batches: Sequence[WriteBatch], known: Known, plan: Plan) -> None:
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


def _plan_messages(batches: Sequence[WriteBatch], known: Known, plan: Plan) -> None:
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


def _plan_chunks(batches: Sequence[WriteBatch], known: Known, plan: Plan) -> None:
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
