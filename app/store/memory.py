"""The in-memory store: the reference implementation of the contract, for tests and the library.

Every method runs without awaiting, so each call, `commit` included, is atomic on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Collection, Sequence

from app.errors import (
    AgentServerError,
    LeaseLostError,
    SessionExistsError,
    SessionNotFoundError,
    WriteConflictError,
)
from app.protocol import Chunk, Message, SessionStatus, SubSessionRef
from app.store.base import QueueEntry, StateStore, StreamWatch, now_ms
from app.store.memory_streams import MemoryStreams
from app.store.queue import MemoryQueue
from app.store.records import (
    InboxMessage,
    InterruptFlag,
    SessionCursor,
    SessionRecord,
    StreamState,
    WriteBatch,
)


class MemoryStore(StateStore):
    """Keeps everything in dictionaries of this process."""

    def __init__(self) -> None:
        super().__init__()
        self._sessions: dict[str, SessionRecord] = {}
        self._leases: dict[str, tuple[str | None, int | None]] = {}
        """Owner and expiry by session, kept apart so updates never touch them."""
        self._by_key: dict[str, str] = {}
        self._messages: dict[str, list[Message]] = {}
        self._refs: dict[str, dict[str, SubSessionRef]] = {}
        self._flags: dict[str, InterruptFlag] = {}
        self._streams = MemoryStreams()
        self._inbox: dict[str, list[InboxMessage]] = {}
        self._inbox_ids = 0
        self._queue = MemoryQueue()

    def submit(self, batch: WriteBatch, *, hold: bool = False) -> asyncio.Future[None]:
        """Validate the whole batch, then apply it at once: all or nothing (`hold` changes
        nothing: there is no group to wait for)."""
        self._check_open()
        outcome: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        try:
            self._validate(batch)
        except AgentServerError as exc:
            outcome.set_exception(exc)
            return outcome
        self._apply(batch)
        outcome.set_result(None)
        if batch.may_free_slot():
            self._notify_queue()
        return outcome

    def _apply(self, batch: WriteBatch) -> None:
        now = now_ms()
        for session_id in batch.deleted_sessions:
            self._delete(session_id)
        for record in batch.new_sessions:
            self._sessions[record.session_id] = record
            self._leases[record.session_id] = (record.owner_id, record.lease_expires_at)
            if record.idempotency_key is not None:
                self._by_key[record.idempotency_key] = record.session_id
            self._messages.setdefault(record.session_id, [])
        for record in batch.updated_sessions:
            self._sessions[record.session_id] = record
        if batch.release and batch.fence is not None:
            self._leases[batch.fence[0]] = (None, None)
        for session_id in batch.cleared_messages:
            self._messages[session_id] = []
        for append in batch.messages:
            self._messages.setdefault(append.session_id, []).append(append.message)
        for upsert in batch.refs:
            self._refs.setdefault(upsert.parent_session_id, {})[upsert.ref.sub_session_id] = (
                upsert.ref
            )
        for take in batch.inbox_taken:
            queued = self._inbox.get(take.session_id, [])
            self._inbox[take.session_id] = [m for m in queued if m.id > take.through]
        for queue in batch.inbox:
            self._inbox_ids += 1
            message = InboxMessage(self._inbox_ids, queue.session_id, queue.content, now)
            self._inbox.setdefault(queue.session_id, []).append(message)
        self._queue.apply(batch.enqueued, batch.queue_moves, batch.dequeued)
        self._streams.apply(batch.chunks, batch.streams, now)

    def _delete(self, session_id: str) -> None:
        self._queue.remove(session_id)
        record = self._sessions.pop(session_id, None)
        if record is None:
            return
        self._leases.pop(session_id, None)
        if record.idempotency_key is not None:
            self._by_key.pop(record.idempotency_key, None)
        self._messages.pop(session_id, None)
        self._refs.pop(session_id, None)
        self._flags.pop(session_id, None)
        self._inbox.pop(session_id, None)
        if record.parent_session_id is not None:
            self._refs.get(record.parent_session_id, {}).pop(session_id, None)

    def _validate(self, batch: WriteBatch) -> None:
        if batch.fence is not None:
            self._check_fence(batch, *batch.fence)
        new_ids: set[str] = set()
        deleted = set(batch.deleted_sessions)
        for record in batch.new_sessions:
            exists = record.session_id in self._sessions and record.session_id not in deleted
            if exists or record.session_id in new_ids:
                raise SessionExistsError(f"Session {record.session_id!r} already exists")
            if record.idempotency_key is not None and record.idempotency_key in self._by_key:
                raise SessionExistsError(
                    f"A session with idempotency key {record.idempotency_key!r} already exists"
                )
            new_ids.add(record.session_id)
        for record in batch.updated_sessions:
            kept = record.session_id in self._sessions and record.session_id not in deleted
            if not kept and record.session_id not in new_ids:
                raise SessionNotFoundError(f"Session {record.session_id!r} not found")
        for session_id in [q.session_id for q in batch.inbox] + [
            e.session_id for e in batch.enqueued
        ]:
            kept = session_id in self._sessions and session_id not in deleted
            if not kept and session_id not in new_ids:
                raise SessionNotFoundError(f"Session {session_id!r} not found")
        counts: dict[str, int] = dict.fromkeys([*deleted, *batch.cleared_messages], 0)
        for append in batch.messages:
            expected = counts.get(append.session_id)
            if expected is None:
                held = self._messages.get(append.session_id)
                expected = len(held) if held else 0
            if append.index != expected:
                raise WriteConflictError(
                    f"Message {append.index} of session {append.session_id!r} conflicts: "
                    f"the next index is {expected}"
                )
            counts[append.session_id] = expected + 1
        lasts: dict[str, int] = {}
        for chunk_append in batch.chunks:
            last = lasts.get(chunk_append.stream_id)
            if last is None:
                last = self._streams.last_sequence(chunk_append.stream_id)
            # Sequences are numbered by one writer, so checking both ends checks the run.
            chunks = chunk_append.chunks
            if chunks[0].sequence != last + 1 or chunks[-1].sequence != last + len(chunks):
                raise WriteConflictError(
                    f"Chunks {chunks[0].sequence}..{chunks[-1].sequence} of stream "
                    f"{chunk_append.stream_id!r} do not follow {last}"
                )
            lasts[chunk_append.stream_id] = last + len(chunks)

    def _check_fence(self, batch: WriteBatch, session_id: str, owner_id: str) -> None:
        created = [r.owner_id for r in batch.new_sessions if r.session_id == session_id]
        holder = created[0] if created else self._leases.get(session_id, (None, None))[0]
        if holder != owner_id:
            raise LeaseLostError(f"The lease of session {session_id!r} is not held by {owner_id!r}")

    async def get_session(self, session_id: str) -> SessionRecord:
        """The session, or `SessionNotFoundError`."""
        self._check_open()
        try:
            return self._with_lease(self._sessions[session_id])
        except KeyError:
            raise SessionNotFoundError(f"Session {session_id!r} not found") from None

    def _with_lease(self, record: SessionRecord) -> SessionRecord:
        owner_id, expires = self._leases[record.session_id]
        if record.owner_id == owner_id and record.lease_expires_at == expires:
            return record
        return record.evolve(owner_id=owner_id, lease_expires_at=expires)

    async def find_session_by_idempotency_key(self, key: str) -> SessionRecord | None:
        """The session created with this key, if any."""
        self._check_open()
        session_id = self._by_key.get(key)
        return None if session_id is None else self._with_lease(self._sessions[session_id])

    async def load_messages(self, session_id: str) -> list[Message]:
        """The session's conversation."""
        self._check_open()
        return list(self._messages.get(session_id, ()))

    async def get_sub_session_refs(self, parent_session_id: str) -> list[SubSessionRef]:
        """The parent's refs, in insertion order."""
        self._check_open()
        return list(self._refs.get(parent_session_id, {}).values())

    async def list_sessions(
        self,
        *,
        statuses: Sequence[SessionStatus] = (),
        agent_type: str | None = None,
        before: SessionCursor | None = None,
        limit: int = 50,
    ) -> list[SessionRecord]:
        """Root sessions, newest first, filtered (a scan: the memory store is for tests)."""
        self._check_open()
        wanted = set(statuses)
        position = None if before is None else (before.created_at, before.session_id)
        found = [
            record
            for record in self._sessions.values()
            if record.is_root
            and (not wanted or record.status in wanted)
            and (agent_type is None or record.agent_type == agent_type)
            and (position is None or (record.created_at, record.session_id) < position)
        ]
        found.sort(key=lambda record: (record.created_at, record.session_id), reverse=True)
        return [self._with_lease(record) for record in found[: max(limit, 0)]]

    async def read_messages(
        self, session_id: str, *, offset: int = 0, limit: int = 100
    ) -> list[Message]:
        """A slice of the session's conversation."""
        self._check_open()
        held = self._messages.get(session_id, [])
        start = max(offset, 0)
        return held[start : start + max(limit, 0)]

    async def list_stream_sessions(self, stream_id: str) -> list[SessionRecord]:
        """The sessions writing to the stream, oldest first."""
        self._check_open()
        found = [record for record in self._sessions.values() if record.stream_id == stream_id]
        found.sort(key=lambda record: (record.created_at, record.session_id))
        return [self._with_lease(record) for record in found]

    async def claim_session(self, session_id: str, owner_id: str, lease_ms: int) -> bool:
        """Take the lease if free, expired or ours."""
        await self.get_session(session_id)
        now = now_ms()
        held_by, expires = self._leases[session_id]
        free = held_by is None or held_by == owner_id or (expires or 0) < now
        if free:
            self._leases[session_id] = (owner_id, now + lease_ms)
        return free

    async def renew_leases(
        self, owner_id: str, session_ids: Sequence[str], lease_ms: int
    ) -> set[str]:
        """Extend the leases we hold."""
        self._check_open()
        held: set[str] = set()
        expires = now_ms() + lease_ms
        for session_id in session_ids:
            lease = self._leases.get(session_id)
            if lease is not None and lease[0] == owner_id:
                self._leases[session_id] = (owner_id, expires)
                held.add(session_id)
        return held

    async def release_session(self, session_id: str, owner_id: str) -> None:
        """Drop our lease."""
        self._check_open()
        lease = self._leases.get(session_id)
        if lease is not None and lease[0] == owner_id:
            self._leases[session_id] = (None, None)

    async def orphaned_trees(self, *, owner_id: str | None = None) -> list[SessionRecord]:
        """Roots of trees with a running session and no live owner (or held by `owner_id`)."""
        self._check_open()
        now = now_ms()
        running = {
            r.stream_id for r in self._sessions.values() if r.status in ("running", "queued")
        }
        orphans = []
        for root_id in running:
            root = self._sessions.get(root_id)
            if root is None:
                continue
            held_by, expires = self._leases[root_id]
            if held_by is None or (expires or 0) < now or (owner_id and held_by == owner_id):
                orphans.append(self._with_lease(root))
        return sorted(orphans, key=lambda record: (record.created_at, record.session_id))

    async def set_interrupt_flag(self, session_id: str, reason: str | None = None) -> None:
        """Raise the flag and tell the listeners."""
        self._check_open()
        self._flags[session_id] = InterruptFlag(session_id, reason, now_ms())
        self._notify_interrupt(session_id)

    async def check_interrupt_flag(self, session_id: str) -> InterruptFlag | None:
        """Pop the flag."""
        self._check_open()
        return self._flags.pop(session_id, None)

    async def read_inbox(self, session_id: str) -> list[InboxMessage]:
        self._check_open()
        return list(self._inbox.get(session_id, ()))

    async def claim_queued(self, cap: int, candidates: Collection[str], now: int) -> list[str]:
        """Free slots to the candidates among the first queued rows (atomic: no await)."""
        self._check_open()
        return self._queue.claim(cap, candidates, now)

    async def queue_entry(self, session_id: str) -> QueueEntry | None:
        """The session's queue row, if any."""
        self._check_open()
        return self._queue.entry(session_id)

    async def queue_position(self, session_id: str) -> int | None:
        """Queued rows ahead of the session's; None unless it is queued."""
        self._check_open()
        return self._queue.position(session_id)

    async def list_queue(self, stream_id: str) -> list[QueueEntry]:
        """The stream's queue rows, by seq."""
        self._check_open()
        return self._queue.stream(stream_id)

    async def queue_counts(self) -> tuple[int, int]:
        """Queued and running rows."""
        self._check_open()
        return self._queue.counts()

    async def read_chunks(
        self, stream_id: str, *, after: int = 0, limit: int = 1000
    ) -> list[Chunk]:
        """Chunks after `after`; sequences are 1-based positions in the list."""
        self._check_open()
        return self._streams.read_chunks(stream_id, after, limit)

    @contextlib.asynccontextmanager
    async def watch_stream(self, stream_id: str) -> AsyncIterator[StreamWatch]:
        """A watch on the stream (nothing to register: commits wake waiters directly)."""
        self._check_open()
        yield self._streams.watch(stream_id, self._check_open)

    async def get_stream(self, stream_id: str) -> StreamState:
        """The stream's progress."""
        self._check_open()
        return self._streams.get(stream_id)

    async def delete_finished_streams(self, *, older_than_ms: int) -> int:
        """Forget the chunks of long-stopped streams."""
        self._check_open()
        return self._streams.delete_stopped_before(now_ms() - older_than_ms)
