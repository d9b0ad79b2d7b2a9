"""The `StateStore` interface every store implements; the records it keeps are in `records`.

A run writes through `commit(WriteBatch)` only: one batch is one atomic write (one transaction
on the SQL stores), so a step's assistant message, tool results, state, refs and chunks land
together or not at all. Reads return immutable records. Leases, the interrupt flag and wake-ups
have their own methods because other processes touch them concurrently with the run.
"""

from __future__ import annotations

import abc
import asyncio
import time
from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from types import TracebackType
from typing import Literal, Self

from app.errors import LifecycleError, StoreClosedError
from app.protocol import Chunk, Message, SessionStatus, SubSessionRef
from app.store.queue import QueueEntry as QueueEntry
from app.store.queue import QueueMove as QueueMove
from app.store.queue import QueueState as QueueState
from app.store.records import (
    InboxMessage,
    InterruptFlag,
    SessionCursor,
    SessionRecord,
    StreamPage,
    StreamState,
    WriteBatch,
)


def now_ms() -> int:
    """Milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class DatabaseTimeouts:
    """How long the store waits for PostgreSQL, so a dead or unreachable server fails requests
    and writes within seconds instead of hanging them (a half-open connection never answers).

    SQLite needs none: a local file does not drop packets (its writers wait for the file's lock
    up to `SQLITE_BUSY_TIMEOUT_MS`)."""

    connect: float = 5.0
    """Seconds to open a connection."""
    statement: float | None = 15.0
    """Seconds a statement may run: the server cancels it then (the connection stays usable),
    and the client gives up a few seconds later, for a server that no longer answers at all.
    The server also ends a transaction left idle for twice that, and probes idle connections
    with TCP keepalives, so the locks a vanished client held are released. None: no bound
    (migrations, which may rewrite large tables)."""


class StreamWatch(abc.ABC):
    """One follower's hold on a stream (`StateStore.watch_stream`): it reads pages, then waits
    for a change past what it read. Wake-ups count from the watch's start, so a change made
    between a read and the next wait is never missed."""

    @abc.abstractmethod
    async def read(self, *, after: int, limit: int) -> StreamPage:
        """The stored chunks after `after` with the stream's progress, in one read;
        `StreamNotFoundError` if the stream does not exist."""

    @abc.abstractmethod
    async def wait(self, timeout: float) -> None:
        """Return once the stream may have changed since the last `read` (at once if it has),
        or on timeout. May return early: callers read again. In-process writes wake a watch at
        once, other processes' within milliseconds (LISTEN/NOTIFY on PostgreSQL, polling on
        SQLite)."""


Listener = Callable[[str], None]
"""Called with a session or stream id; must not block."""

QueueListener = Callable[[], None]
"""Called when a slot of the background queue may be free; must not block."""


class StateStore(abc.ABC):
    """Where sessions, messages, sub-session refs, interrupt flags and streams live.

    A store is an async context manager: `async with store:` opens it (migrating a SQL database) and
    closes it. Every method raises `StoreClosedError` outside that window; unknown ids raise the
    project's not-found errors and duplicates its conflict errors, never a driver exception.
    """

    def __init__(self) -> None:
        self._state: Literal["new", "open", "closed"] = "new"
        self._interrupt_listeners: list[Listener] = []
        self._queue_listeners: list[QueueListener] = []

    # -- lifecycle -----------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._state != "new":
            raise LifecycleError(f"{type(self).__name__} can only be opened once")
        await self._open()
        self._state = "open"
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._state == "open":
            self._state = "closed"
            await self._close()

    @property
    def is_open(self) -> bool:
        """Whether the store is open for use."""
        return self._state == "open"

    def _check_open(self) -> None:
        if self._state != "open":
            raise StoreClosedError(f"{type(self).__name__} is {self._state}, not open")

    async def _open(self) -> None:  # noqa: B027 - optional hook
        """Acquire resources (connections, migrations)."""

    async def _close(self) -> None:  # noqa: B027 - optional hook
        """Release resources."""

    async def ping(self, timeout: float = 2.0) -> None:
        """Return once the store answers; `StoreUnavailableError` if it does not within
        `timeout` seconds, or if its writes are stuck (what a readiness probe asks)."""
        self._check_open()

    # -- writes --------------------------------------------------------------------------------

    async def commit(self, batch: WriteBatch) -> None:
        """Apply `batch` atomically: all of it or, on any error, none of it."""
        await self.submit(batch)

    @abc.abstractmethod
    def submit(self, batch: WriteBatch, *, hold: bool = False) -> asyncio.Future[None]:
        """Take `batch` for an atomic commit now, and return the future of its outcome: done
        once it has landed, or failed with the error that refused it (it then changed nothing).

        With `hold`, the caller does not wait for the batch now: a store that commits in groups
        may keep it a few milliseconds, to commit it with the next batch someone waits for.

        Batches that write to one stream (`WriteBatch.stream_ids`) are applied in the order
        they were submitted, so a writer may submit again before its last batch has landed.
        When the database fails one (`StoreError`), those of its streams already submitted
        after it fail too; one refused by a rule (a conflict, a missing session) leaves them to
        the same rules. Batches of unrelated streams may land in any order. Raises
        `StoreClosedError` when closed.
        """

    # -- sessions ------------------------------------------------------------------------------

    @abc.abstractmethod
    async def get_session(self, session_id: str) -> SessionRecord:
        """The session, or `SessionNotFoundError`."""

    @abc.abstractmethod
    async def find_session_by_idempotency_key(self, key: str) -> SessionRecord | None:
        """The session created with this idempotency key, if any."""

    @abc.abstractmethod
    async def load_messages(self, session_id: str) -> list[Message]:
        """The session's conversation, oldest first (empty for an unknown session)."""

    @abc.abstractmethod
    async def get_sub_session_refs(self, parent_session_id: str) -> list[SubSessionRef]:
        """The parent's sub-session refs in the order they were first added."""

    # -- history (what a UI lists and re-renders) ----------------------------------------------

    @abc.abstractmethod
    async def list_sessions(
        self,
        *,
        statuses: Sequence[SessionStatus] = (),
        agent_type: str | None = None,
        before: SessionCursor | None = None,
        limit: int = 50,
    ) -> list[SessionRecord]:
        """Root sessions (those that own their stream), newest first: by `created_at`, then
        `session_id`, both descending. Only those with one of `statuses` (any when empty) and of
        `agent_type` (any when None), and strictly after `before` in that order, at most
        `limit`. A page's last record is the next page's `before`: a session created meanwhile
        never shifts a page."""

    @abc.abstractmethod
    async def read_messages(
        self, session_id: str, *, offset: int = 0, limit: int = 100
    ) -> list[Message]:
        """The session's messages from position `offset` (0-based), oldest first, at most
        `limit` (empty for an unknown session)."""

    @abc.abstractmethod
    async def list_stream_sessions(self, stream_id: str) -> list[SessionRecord]:
        """Every session that writes to the stream (a root and its local descendants), by
        `created_at`, then `session_id`."""

    # -- leases --------------------------------------------------------------------------------

    @abc.abstractmethod
    async def claim_session(self, session_id: str, owner_id: str, lease_ms: int) -> bool:
        """Take the session's lease if free, expired or already ours; say whether we hold it."""

    @abc.abstractmethod
    async def renew_leases(
        self, owner_id: str, session_ids: Sequence[str], lease_ms: int
    ) -> set[str]:
        """Extend our leases on these sessions; returns the ids we still hold."""

    @abc.abstractmethod
    async def release_session(self, session_id: str, owner_id: str) -> None:
        """Give up our lease on the session (nothing happens if we do not hold it)."""

    @abc.abstractmethod
    async def orphaned_trees(self, *, owner_id: str | None = None) -> list[SessionRecord]:
        """The root sessions of trees that have a `running` (or `queued`) session but no live
        owner: the root's lease has expired, or no one holds it. With `owner_id`, the trees that
        owner holds are included too (a restarted server finding its own). Oldest first."""

    # -- interrupts ----------------------------------------------------------------------------

    @abc.abstractmethod
    async def set_interrupt_flag(self, session_id: str, reason: str | None = None) -> None:
        """Raise the durable interrupt flag (idempotent; the latest reason wins)."""

    @abc.abstractmethod
    async def check_interrupt_flag(self, session_id: str) -> InterruptFlag | None:
        """Atomically read and clear the flag: each raised flag is returned exactly once."""

    def add_interrupt_listener(self, listener: Listener) -> Callable[[], None]:
        """Call `listener(session_id)` soon after any process raises a flag; returns a remover.

        A fast path only: the flag itself stays the truth.
        """
        self._interrupt_listeners.append(listener)
        return lambda: self._interrupt_listeners.remove(listener)

    @abc.abstractmethod
    async def read_inbox(self, session_id: str) -> list[InboxMessage]:
        """The messages queued for the session and not yet taken, oldest first."""

    # -- background queue (see `app.store.queue`) ----------------------------------------------

    @abc.abstractmethod
    async def claim_queued(self, cap: int, candidates: Collection[str], now: int) -> list[str]:
        """Hand out free slots, atomically across processes: of the `cap - running` first
        `queued` rows by seq (all of them, not only `candidates`: a head another process runs
        keeps its place and its slot), those in `candidates` become `running` with
        `started_at = now`; returns them in seq order."""

    @abc.abstractmethod
    async def queue_entry(self, session_id: str) -> QueueEntry | None:
        """The session's queue row, if it has one."""

    @abc.abstractmethod
    async def queue_position(self, session_id: str) -> int | None:
        """How many `queued` rows are ahead of the session's (0: it is next); None unless its
        row is `queued`."""

    @abc.abstractmethod
    async def list_queue(self, stream_id: str) -> list[QueueEntry]:
        """The stream's queue rows, by seq."""

    @abc.abstractmethod
    async def queue_counts(self) -> tuple[int, int]:
        """How many rows are `queued`, and how many `running`, over every stream."""

    def add_queue_listener(self, listener: QueueListener) -> Callable[[], None]:
        """Call `listener()` soon after a write that may free a slot (`WriteBatch.may_free_slot`)
        lands; returns a remover. This store's own writes are told at once; another process's
        within milliseconds on PostgreSQL (LISTEN/NOTIFY), not at all on SQLite, whose
        claimants find the slot on their next poll.

        A fast path only: `claim_queued` stays the truth.
        """
        self._queue_listeners.append(listener)
        return lambda: self._queue_listeners.remove(listener)

    # -- streams -------------------------------------------------------------------------------

    @abc.abstractmethod
    async def read_chunks(
        self, stream_id: str, *, after: int = 0, limit: int = 1000
    ) -> list[Chunk]:
        """Chunks with sequence > `after`, in order, at most `limit`."""

    @abc.abstractmethod
    def watch_stream(self, stream_id: str) -> AbstractAsyncContextManager[StreamWatch]:
        """A watch for following the stream: `async with store.watch_stream(id) as watch:`."""

    @abc.abstractmethod
    async def get_stream(self, stream_id: str) -> StreamState:
        """The stream's last sequence and status, or `StreamNotFoundError`."""

    @abc.abstractmethod
    async def delete_finished_streams(self, *, older_than_ms: int) -> int:
        """Delete the chunks of streams stopped before `now - older_than_ms`; returns how many."""

    def _notify_interrupt(self, session_id: str) -> None:
        for listener in list(self._interrupt_listeners):
            listener(session_id)

    def _notify_queue(self) -> None:
        for listener in list(self._queue_listeners):
            listener()
