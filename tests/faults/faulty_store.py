"""`FaultyStore`: a `StateStore` that delegates to a real one (memory, SQLite, PostgreSQL) and
makes its writes and reads fail, seeded and reproducibly, with the errors the real stores raise.

Each operation is keyed by what it does (a write by the messages, sessions and streams it
writes; a read by its method and arguments) and by how many times that operation was tried, and
`random.Random(f"{seed}|{key}|{attempt}")` decides its fate. So a seed gives the same faults to
the same logical operations however the event loop interleaves them, and a retried operation
draws again.

Write faults keep the `StateStore.submit` contract: one stream's writes are applied in the
order they were submitted; when one fails as the database would fail it (`StoreError`), those
of its streams submitted after it fail too; a rule's refusal leaves them to the rules.

The wrapper also plays a process's fate: `freeze` (every call waits, as a SIGSTOPped process
would), `thaw`, and `sever` (the process is gone: nothing it does reaches the store again).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Coroutine, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from app.errors import SessionExistsError, StoreError, StoreRefusedError
from app.protocol import Chunk, Message, SessionStatus, SubSessionRef
from app.store import (
    InboxMessage,
    InterruptFlag,
    QueueEntry,
    SessionRecord,
    StateStore,
    StreamState,
    WriteBatch,
)
from app.store.base import Listener, QueueListener, StreamWatch
from app.store.records import SessionCursor
from tests.faults.ledger import Ledger

T = TypeVar("T")


class WriteFault(StrEnum):
    """What can happen to a write."""

    STORE_ERROR = "store_error"
    """The database failed it (a connection lost before the commit): `StoreError`."""
    LOST_ACK = "lost_ack"
    """It landed, but the connection broke before the answer: the caller hears `StoreError`."""
    REFUSED = "refused"
    """A rule refused it (a conflict): `SessionExistsError`."""
    VALUE_REFUSED = "value_refused"
    """The database cannot hold one of its values (as PostgreSQL refuses a NUL character)."""
    SLOW = "slow"
    """It lands after a delay."""
    HANG = "hang"
    """It never settles until the faults heal (then `StoreError`, as a statement timeout
    would fail it), the process is severed, or its caller cancels it."""


class ReadFault(StrEnum):
    """What can happen to a read (or a lease, flag or listing call)."""

    STORE_ERROR = "store_error"
    SLOW = "slow"
    HANG = "hang"


def value_refused_error() -> StoreError:
    """The error a store raises for a value its database cannot hold (as PostgreSQL refuses a
    NUL character): a refusal, which no retry or takeover can get past."""
    return StoreRefusedError(
        "Could not commit: UntranslatableCharacterError: unsupported Unicode escape sequence "
        "(injected)"
    )


@dataclass(frozen=True)
class FaultConfig:
    """How often and how operations fail."""

    seed: int
    write_rate: float = 0.0
    read_rate: float = 0.0
    write_kinds: tuple[WriteFault, ...] = tuple(WriteFault)
    read_kinds: tuple[ReadFault, ...] = tuple(ReadFault)
    slow_seconds: float = 0.05
    max_faults: int | None = None
    """Stop injecting after this many faults (one refused write, say)."""
    read_methods: frozenset[str] | None = None
    """Only these reads may fail (`check_flag`, `renew`, `orphans`, ...); all when None."""


def batch_key(batch: WriteBatch, flushes: Counter[str]) -> str:
    """What a write does, as a key that does not depend on timing: its sessions, cleared
    conversations, messages and refs. A flush of chunks alone is keyed by its stream and how
    many such flushes that stream had."""
    parts: list[str] = []
    parts += [f"new:{r.session_id}" for r in batch.new_sessions]
    parts += [f"upd:{r.session_id}:{r.status}:{r.step_count}" for r in batch.updated_sessions]
    parts += [f"clr:{s}" for s in batch.cleared_messages]
    parts += [f"msg:{m.session_id}:{m.index}" for m in batch.messages]
    parts += [f"ref:{u.ref.sub_session_id}:{u.ref.status}" for u in batch.refs]
    parts += [f"str:{u.stream_id}:{u.status}" for u in batch.streams]
    parts += [f"enq:{e.session_id}" for e in batch.enqueued]
    parts += [f"qmv:{m.session_id}:{m.state}" for m in batch.queue_moves]
    parts += [f"deq:{s}" for s in batch.dequeued]
    if not parts:
        stream = ",".join(sorted(batch.stream_ids()))
        flushes[stream] += 1
        parts.append(f"flush:{stream}:{flushes[stream]}")
    return "|".join(sorted(parts))


class FaultyStore(StateStore):
    """Delegates to `inner`, failing operations as `config` decides while armed.

    `scope` (a session-id prefix) limits `list_orphaned_sessions` to one scenario's sessions, so
    scenarios can share a database without taking over each other's runs.
    """

    def __init__(
        self,
        inner: StateStore,
        config: FaultConfig,
        ledger: Ledger,
        *,
        scope: str | None = None,
        name: str = "store",
    ) -> None:
        super().__init__()
        self.inner = inner
        self.config = config
        self.ledger = ledger
        self.scope = scope
        self.name = name
        self.armed = False
        self.injected: Counter[str] = Counter()
        """Faults injected so far, by kind (`write:hang`, `read:store_error`, ...)."""
        self.trace: list[str] = []
        """Each injected fault with the key it hit, in order."""
        self._attempts: Counter[str] = Counter()
        self._flushes: Counter[str] = Counter()
        self._tails: dict[str, asyncio.Future[None]] = {}
        self._thawed = asyncio.Event()
        self._thawed.set()
        self._released = asyncio.Event()
        self._severed = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._handed: set[asyncio.Future[None]] = set()
        """Writes handed to the real store that have not landed (or failed) yet."""

    # -- control -------------------------------------------------------------------------------

    def arm(self) -> None:
        """Start injecting faults."""
        self.armed = True
        self._released.clear()

    def heal(self) -> None:
        """Stop injecting faults; hung operations fail now (as a timeout would end them)."""
        self.armed = False
        self._released.set()

    def freeze(self) -> None:
        """Every call waits from now on, as in a stopped process."""
        self._thawed.clear()

    def thaw(self) -> None:
        """Let waiting and later calls go on."""
        self._thawed.set()

    def sever(self) -> None:
        """The process is gone: every call fails from now on, and nothing more is written."""
        self._severed = True
        self._released.set()
        self._thawed.set()

    @property
    def severed(self) -> bool:
        """Whether `sever` was called."""
        return self._severed

    async def _close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- deciding ------------------------------------------------------------------------------

    def _draw(self, key: str) -> random.Random:
        attempt = self._attempts[key]
        self._attempts[key] += 1
        return random.Random(f"{self.config.seed}|{key}|{attempt}")

    def _decide_write(self, batch: WriteBatch) -> WriteFault | None:
        key = batch_key(batch, self._flushes)
        draw = self._draw(f"w|{key}")
        if not self._may_inject() or draw.random() >= self.config.write_rate:
            return None
        fault = draw.choice(self.config.write_kinds)
        self.injected[f"write:{fault}"] += 1
        self.trace.append(f"{self.ledger.tick()} {self.name} write:{fault} {key}")
        return fault

    def _decide_read(self, key: str) -> ReadFault | None:
        draw = self._draw(f"r|{key}")
        methods = self.config.read_methods
        if methods is not None and key.split(":")[0] not in methods:
            return None
        if not self._may_inject() or draw.random() >= self.config.read_rate:
            return None
        fault = draw.choice(self.config.read_kinds)
        self.injected[f"read:{fault}"] += 1
        self.trace.append(f"{self.ledger.tick()} {self.name} read:{fault} {key}")
        return fault

    def _may_inject(self) -> bool:
        limit = self.config.max_faults
        return self.armed and (limit is None or sum(self.injected.values()) < limit)

    def _gone(self) -> StoreError:
        return StoreError(f"{self.name}: the process is gone (injected)")

    # -- writes --------------------------------------------------------------------------------

    def submit(self, batch: WriteBatch, *, hold: bool = False) -> asyncio.Future[None]:
        """Fail, delay, hang or pass the batch, keeping the order of each stream's writes."""
        self._check_open()
        if self._severed:
            raise self._gone()
        fault = self._decide_write(batch)
        streams = batch.stream_ids()
        waits = [tail for s in streams if (tail := self._tails.get(s)) and not tail.done()]
        loop = asyncio.get_running_loop()
        if not waits and self._thawed.is_set():
            if fault is None:
                return self._pass(batch, hold)
            error = self._immediate_error(fault)
            if error is not None:
                failed: asyncio.Future[None] = loop.create_future()
                failed.set_exception(error)
                return failed
        outcome: asyncio.Future[None] = loop.create_future()
        for stream_id in streams:
            self._tails[stream_id] = outcome
        self._spawn(self._later(batch, hold, fault, waits, outcome))
        return outcome

    def _immediate_error(self, fault: WriteFault) -> Exception | None:
        if fault == WriteFault.STORE_ERROR:
            return StoreError(f"Could not commit: ConnectionResetError ({self.name}, injected)")
        if fault == WriteFault.REFUSED:
            return SessionExistsError(
                "The batch conflicts with a concurrent write (a session, message or chunk "
                "exists) (injected)"
            )
        if fault == WriteFault.VALUE_REFUSED:
            return value_refused_error()
        return None

    def _pass(self, batch: WriteBatch, hold: bool) -> asyncio.Future[None]:
        landed = self.inner.submit(batch, hold=hold)

        def record(done: asyncio.Future[None]) -> None:
            if not done.cancelled() and done.exception() is None:
                self.ledger.landed(batch)

        if landed.done():
            record(landed)
        else:
            landed.add_done_callback(record)
            self._handed.add(landed)
            landed.add_done_callback(self._handed.discard)
        return landed

    async def handed_settled(self, timeout: float) -> None:
        """Wait (at most `timeout` s) for the writes handed to the real store to land or fail.
        A killed process's writes either landed before it died or never do; here the real
        store is shared and outlives the node, so one it had taken could otherwise land after
        a successor with the node's owner id had read the store (and redo what it saved)."""
        if self._handed:
            await asyncio.wait(list(self._handed), timeout=timeout)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _later(
        self,
        batch: WriteBatch,
        hold: bool,
        fault: WriteFault | None,
        waits: Sequence[asyncio.Future[None]],
        outcome: asyncio.Future[None],
    ) -> None:
        try:
            if waits:
                await asyncio.wait(waits)  # not gather: cancelling this must not cancel them
            if any(not w.cancelled() and isinstance(w.exception(), StoreError) for w in waits):
                _settle(outcome, StoreError("An earlier write of the stream failed (injected)"))
                return
            await self._thawed.wait()
            if outcome.done():
                return  # withdrawn by its submitter
            if self._severed:
                _settle(outcome, self._gone())
                return
            error = self._immediate_error(fault) if fault is not None else None
            if error is not None:
                _settle(outcome, error)
                return
            if fault == WriteFault.SLOW:
                await asyncio.sleep(self.config.slow_seconds)
            elif fault == WriteFault.HANG:
                await self._until_released(outcome)
                if not outcome.done():
                    _settle(outcome, self._gone() if self._severed else _timed_out("commit"))
                return
            if self._severed:
                _settle(outcome, self._gone())
                return
            landed = self._pass(batch, hold)
            outcome.add_done_callback(lambda done: landed.cancel() if done.cancelled() else None)
            try:
                await landed
            except asyncio.CancelledError:
                if not outcome.done():
                    outcome.cancel()
                return
            except Exception as exc:
                _settle(outcome, exc)
                return
            if fault == WriteFault.LOST_ACK:
                _settle(outcome, StoreError(f"Could not commit: connection lost ({self.name})"))
            elif not outcome.done():
                outcome.set_result(None)
        except asyncio.CancelledError:
            if not outcome.done():
                outcome.cancel()
            raise

    async def _until_released(self, outcome: asyncio.Future[None]) -> None:
        released: asyncio.Future[Any] = asyncio.ensure_future(self._released.wait())
        either: list[asyncio.Future[Any]] = [released, outcome]
        try:
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        finally:
            released.cancel()

    # -- reads ---------------------------------------------------------------------------------

    async def _read(self, key: str, call: Callable[[], Awaitable[T]]) -> T:
        self._check_open()
        if self._severed:
            raise self._gone()
        await self._thawed.wait()
        if self._severed:
            raise self._gone()
        fault = self._decide_read(key)
        if fault == ReadFault.STORE_ERROR:
            raise StoreError(f"Could not {key.split(':')[0]}: ConnectionResetError (injected)")
        if fault == ReadFault.HANG:
            await self._released.wait()
            raise self._gone() if self._severed else _timed_out(key.split(":")[0])
        if fault == ReadFault.SLOW:
            await asyncio.sleep(self.config.slow_seconds)
        return await call()

    async def get_session(self, session_id: str) -> SessionRecord:
        return await self._read(
            f"get_session:{session_id}", lambda: self.inner.get_session(session_id)
        )

    async def find_session_by_idempotency_key(self, key: str) -> SessionRecord | None:
        return await self._read(
            f"find_key:{key}", lambda: self.inner.find_session_by_idempotency_key(key)
        )

    async def load_messages(self, session_id: str) -> list[Message]:
        return await self._read(
            f"load_messages:{session_id}", lambda: self.inner.load_messages(session_id)
        )

    async def get_sub_session_refs(self, parent_session_id: str) -> list[SubSessionRef]:
        return await self._read(
            f"get_refs:{parent_session_id}",
            lambda: self.inner.get_sub_session_refs(parent_session_id),
        )

    async def claim_session(self, session_id: str, owner_id: str, lease_ms: int) -> bool:
        return await self._read(
            f"claim:{session_id}:{owner_id}",
            lambda: self.inner.claim_session(session_id, owner_id, lease_ms),
        )

    async def renew_leases(
        self, owner_id: str, session_ids: Sequence[str], lease_ms: int
    ) -> set[str]:
        return await self._read(
            f"renew:{owner_id}", lambda: self.inner.renew_leases(owner_id, session_ids, lease_ms)
        )

    async def release_session(self, session_id: str, owner_id: str) -> None:
        await self._read(
            f"release:{session_id}", lambda: self.inner.release_session(session_id, owner_id)
        )

    async def list_sessions(
        self,
        *,
        statuses: Sequence[SessionStatus] = (),
        agent_type: str | None = None,
        before: SessionCursor | None = None,
        limit: int = 50,
    ) -> list[SessionRecord]:
        return await self._read(
            "list_sessions",
            lambda: self.inner.list_sessions(
                statuses=statuses, agent_type=agent_type, before=before, limit=limit
            ),
        )

    async def read_messages(
        self, session_id: str, *, offset: int = 0, limit: int = 100
    ) -> list[Message]:
        return await self._read(
            f"read_messages:{session_id}:{offset}",
            lambda: self.inner.read_messages(session_id, offset=offset, limit=limit),
        )

    async def read_inbox(self, session_id: str) -> list[InboxMessage]:
        return await self._read(f"inbox:{session_id}", lambda: self.inner.read_inbox(session_id))

    async def claim_queued(self, cap: int, candidates: Collection[str], now: int) -> list[str]:
        return await self._read(
            f"claim_queued:{','.join(sorted(candidates))}",
            lambda: self.inner.claim_queued(cap, candidates, now),
        )

    async def queue_entry(self, session_id: str) -> QueueEntry | None:
        return await self._read(
            f"queue_entry:{session_id}", lambda: self.inner.queue_entry(session_id)
        )

    async def queue_position(self, session_id: str) -> int | None:
        return await self._read(
            f"queue_position:{session_id}", lambda: self.inner.queue_position(session_id)
        )

    async def list_queue(self, stream_id: str) -> list[QueueEntry]:
        return await self._read(f"list_queue:{stream_id}", lambda: self.inner.list_queue(stream_id))

    async def queue_counts(self) -> tuple[int, int]:
        return await self._read("queue_counts", self.inner.queue_counts)

    async def list_stream_sessions(self, stream_id: str) -> list[SessionRecord]:
        return await self._read(
            f"stream_sessions:{stream_id}", lambda: self.inner.list_stream_sessions(stream_id)
        )

    async def orphaned_trees(self, *, owner_id: str | None = None) -> list[SessionRecord]:
        found = await self._read("orphans", lambda: self.inner.orphaned_trees(owner_id=owner_id))
        if self.scope is None:
            return found
        # Ids are `s<seed>` and `s<seed>-...`: a bare prefix test let scenario s1 take over s10.
        scope = self.scope
        return [
            record
            for record in found
            if record.session_id == scope or record.session_id.startswith(f"{scope}-")
        ]

    async def set_interrupt_flag(self, session_id: str, reason: str | None = None) -> None:
        await self._read(
            f"set_flag:{session_id}", lambda: self.inner.set_interrupt_flag(session_id, reason)
        )

    async def check_interrupt_flag(self, session_id: str) -> InterruptFlag | None:
        return await self._read(
            f"check_flag:{session_id}", lambda: self.inner.check_interrupt_flag(session_id)
        )

    def add_interrupt_listener(self, listener: Listener) -> Callable[[], None]:
        def heard(session_id: str) -> None:
            if not self._severed:
                listener(session_id)

        return self.inner.add_interrupt_listener(heard)

    def add_queue_listener(self, listener: QueueListener) -> Callable[[], None]:
        def heard() -> None:
            if not self._severed:
                listener()

        return self.inner.add_queue_listener(heard)

    async def read_chunks(
        self, stream_id: str, *, after: int = 0, limit: int = 1000
    ) -> list[Chunk]:
        return await self._read(
            f"read_chunks:{stream_id}:{after}",
            lambda: self.inner.read_chunks(stream_id, after=after, limit=limit),
        )

    @contextlib.asynccontextmanager
    async def watch_stream(self, stream_id: str) -> AsyncIterator[StreamWatch]:
        async with self.inner.watch_stream(stream_id) as watch:
            yield watch

    async def get_stream(self, stream_id: str) -> StreamState:
        return await self._read(f"get_stream:{stream_id}", lambda: self.inner.get_stream(stream_id))

    async def delete_finished_streams(self, *, older_than_ms: int) -> int:
        return await self.inner.delete_finished_streams(older_than_ms=older_than_ms)


def _timed_out(action: str) -> StoreError:
    return StoreError(f"Could not {action}: the statement timed out (injected hang)")


def _settle(outcome: asyncio.Future[None], error: BaseException) -> None:
    """Fail a write's outcome, marked as retrieved: a held write's submitter may never await it
    (the stream writer notes failures itself)."""
    if not outcome.done():
        outcome.set_exception(error)
        outcome.exception()
