"""`SqlStore`: the `StateStore` contract over SQLite (embedded) or PostgreSQL (replicas).

Writes go through a group committer (one writer task, many batches per transaction); reads,
leases and flags are single statements (see `direct`). Wake-ups reach other processes through
LISTEN/NOTIFY on PostgreSQL and a data_version poller on SQLite (see `notify`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Collection, Sequence

from sqlalchemy.ext.asyncio import AsyncEngine

from app import observability
from app.errors import StoreUnavailableError
from app.protocol import Message, SessionStatus
from app.store.base import DatabaseTimeouts, Listener, QueueEntry, StreamWatch, now_ms
from app.store.records import SessionCursor, SessionRecord, WriteBatch
from app.store.sql import history
from app.store.sql.direct import DirectMethods
from app.store.sql.driver import ConnectionPool
from app.store.sql.engines import (
    DRIVER_ERRORS,
    Backend,
    client_timeout,
    create_engine,
    ensure_sqlite_folder,
    parse_url,
    translate_errors,
)
from app.store.sql.lanes import WriteLanes
from app.store.sql.migrate import upgrade
from app.store.sql.notify import PgListener, Poller
from app.store.sql.queries import INTERRUPT_CHANNEL, queries_for
from app.store.sql.queue import SqlQueue
from app.store.sql.watch import SharedReads, StreamWaiters, WaitersWatch
from app.store.sql.writes import BatchWriter

logger = logging.getLogger(__name__)

SQLITE_POLL_INTERVAL = 0.025
"""Seconds between SQLite polls while someone waits or listens."""

PG_FALLBACK_POLL_INTERVAL = 0.05
"""Seconds between PostgreSQL polls while the LISTEN connection is down."""

POSTGRES_WRITE_LANES = 2
"""Transactions a PostgreSQL store has in flight at once (see `lanes`)."""

WRITE_HOLD = 0.002
"""Seconds an idle writer keeps batches no one waits for, for one that someone waits for to
join them (a child's end and its parent's step: one transaction, not two in a row)."""

DRAIN_TIMEOUT = 5.0
"""Seconds closing waits for queued writes to land, and for connections to close."""

CONFLICT = "The batch conflicts with a concurrent write (a session, message or chunk exists)"


class SqlStore(DirectMethods):
    """The store on a SQL database named by a `sqlite+aiosqlite://` or `postgresql+asyncpg://` URL.

    Opening it (`async with`) creates the SQLite file's folder if needed and migrates the
    database to the current schema. `pool_size` bounds its open connections (one more listens
    on PostgreSQL); `write_lanes` is how many write transactions may be in flight at once;
    `timeouts` bound how long PostgreSQL may take to connect and to run a statement.
    """

    def __init__(
        self,
        database_url: str,
        *,
        pool_size: int = 8,
        write_lanes: int | None = None,
        timeouts: DatabaseTimeouts | None = None,
    ) -> None:
        super().__init__()
        self._url, backend = parse_url(database_url)
        self._timeouts = timeouts or DatabaseTimeouts()
        self.backend: Backend = backend
        """Which database the URL names: "sqlite" or "postgresql"."""
        self._pool_size = pool_size
        self._origin = uuid.uuid4().hex[:12]
        self._queries = queries_for(self.backend)
        self._writer = BatchWriter(self._queries, origin=self._origin)
        # SQLite has one writer at a time whatever we do; PostgreSQL runs a transaction per lane.
        lanes = write_lanes or (POSTGRES_WRITE_LANES if backend == "postgresql" else 1)
        self._committer = WriteLanes(
            observability.timed_commit(self._apply), count=lanes, hold=WRITE_HOLD
        )
        self._waiters = StreamWaiters()
        self._reads = SharedReads(self._read_page)
        self._json_as_text = self.backend == "sqlite"
        self._history = history.HistoryReads(
            lambda: self._connections, self.backend, self._queries.ids
        )
        self._queue = SqlQueue(lambda: self._connections, self.backend)
        self._engine: AsyncEngine | None = None
        self._pool: ConnectionPool | None = None
        self._listener: PgListener | None = None
        self._poller: Poller | None = None
        self._background: set[asyncio.Task[None]] = set()

    @property
    def commit_groups(self) -> int:
        """Transactions the group committer has committed (for benchmarks and tests)."""
        return self._committer.groups

    # -- lifecycle -----------------------------------------------------------------------------

    async def _open(self) -> None:
        pg = self.backend == "postgresql"
        if not pg:
            with translate_errors("create the database's folder"):
                ensure_sqlite_folder(self._url)
        with translate_errors("migrate the database"):
            await upgrade(self._url, self.backend)
        self._engine = create_engine(
            self._url, self.backend, pool_size=self._pool_size, timeouts=self._timeouts
        )
        try:
            self._pool = ConnectionPool(self._engine, self.backend, size=self._pool_size)
            self._poller = Poller(
                self._pool,
                self._queries,
                self._waiters,
                self._notify_interrupt,
                self._poll_wanted,
                interval=PG_FALLBACK_POLL_INTERVAL if pg else SQLITE_POLL_INTERVAL,
            )
            if pg:
                self._listener = PgListener(
                    create_engine(self._url, self.backend, pooled=False, timeouts=self._timeouts),
                    origin=self._origin,
                    on_stream=self._waiters.notified,
                    on_interrupt=self._notify_interrupt,
                    on_queue=self._notify_queue,
                    on_reconnect=self._on_reconnect,
                    on_lost=self._ensure_polling,
                )
                with translate_errors("listen for notifications"):
                    await self._listener.start()
            self._committer.start()
        except BaseException:
            await self._dispose()
            raise

    async def _close(self) -> None:
        try:
            async with asyncio.timeout(DRAIN_TIMEOUT):
                await self._committer.close()
        except TimeoutError:
            # The database does not take them (it is gone): closing must not wait for it.
            logger.warning("Queued writes did not land within %ss of closing", DRAIN_TIMEOUT)
        self._waiters.wake_all()
        await self._dispose()

    async def _dispose(self) -> None:
        if self._poller is not None:
            await self._poller.close()
        if self._listener is not None:
            await self._listener.close()
        for task in list(self._background):
            task.cancel()
        if self._pool is not None:
            await self._pool.close()
        if self._engine is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(DRAIN_TIMEOUT):
                    await self._engine.dispose()

    @property
    def _connections(self) -> ConnectionPool:
        assert self._pool is not None
        return self._pool

    async def ping(self, timeout: float = 2.0) -> None:
        """Return once a pooled connection answers and no write has been stuck in the database
        for longer than a statement may take; `StoreUnavailableError` otherwise."""
        self._check_open()
        stuck = self._committer.busy_for()
        statement = self._timeouts.statement
        if statement is not None and stuck > client_timeout(statement):
            raise StoreUnavailableError(f"A write has waited {stuck:.0f}s for the database")
        try:
            async with asyncio.timeout(timeout), self._connections.acquire() as conn:
                alive = await conn.alive(timeout)
        except DRIVER_ERRORS as exc:  # a timeout among them
            raise StoreUnavailableError(f"The database does not answer: {exc!r}") from exc
        if not alive:
            raise StoreUnavailableError("The database does not answer")

    # -- writes --------------------------------------------------------------------------------

    def submit(self, batch: WriteBatch, *, hold: bool = False) -> asyncio.Future[None]:
        """Take `batch` for an atomic commit, grouped with concurrent ones into one
        transaction of its streams' write lane."""
        self._check_open()
        if batch.is_empty():
            landed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            landed.set_result(None)
            return landed
        return self._committer.submit(batch, hold=hold)

    async def _apply(self, batches: Sequence[WriteBatch]) -> None:
        now = now_ms()
        with translate_errors("commit", conflict=CONFLICT):
            async with self._connections.acquire() as conn:
                # PostgreSQL writes a group as the database is expected to be in one statement;
                # when it is not (or on SQLite), a transaction checks first, and says what broke.
                plan = None
                if self.backend == "postgresql":
                    plan = await self._writer.apply_at_once(conn, batches, now=now)
                if plan is None:
                    async with conn.transaction():
                        plan = await self._writer.apply(conn, batches, now=now)
        if self._waiters:
            for stream_id, (chunks, status) in plan.written(self._waiters).items():
                self._waiters.landed(stream_id, chunks, status)
        self._waiters.wake(plan.touched())
        if self._queue_listeners and any(batch.may_free_slot() for batch in batches):
            self._notify_queue()

    # -- history (see `history`) -------------------------------------------------------------

    async def list_sessions(
        self,
        *,
        statuses: Sequence[SessionStatus] = (),
        agent_type: str | None = None,
        before: SessionCursor | None = None,
        limit: int = 50,
    ) -> list[SessionRecord]:
        """Root sessions newest first, filtered, after the cursor (one indexed statement)."""
        self._check_open()
        return await self._history.list_sessions(statuses, agent_type, before, limit)

    async def read_messages(
        self, session_id: str, *, offset: int = 0, limit: int = 100
    ) -> list[Message]:
        """A page of the session's conversation, by position."""
        self._check_open()
        return await self._history.read_messages(session_id, offset, limit)

    async def list_stream_sessions(self, stream_id: str) -> list[SessionRecord]:
        """The sessions writing to the stream, oldest first."""
        self._check_open()
        return await self._history.stream_sessions(stream_id)

    # -- interrupts ----------------------------------------------------------------------------

    async def set_interrupt_flag(self, session_id: str, reason: str | None = None) -> None:
        """Raise the durable flag and tell every process's listeners."""
        self._check_open()
        requested_at = now_ms()
        row = {"session_id": session_id, "reason": reason, "requested_at": requested_at}
        with translate_errors("raise an interrupt flag"):
            async with self._connections.acquire() as conn, conn.transaction():
                await conn.execute(self._queries.set_flag, row)
                if self.backend == "postgresql":
                    payload = f"{self._origin} {session_id}"
                    await conn.fetch(
                        self._queries.notify,
                        {"channel": INTERRUPT_CHANNEL, "payloads": [payload]},
                    )
        if self._poller is not None:
            self._poller.flag_seen(session_id, requested_at)
        self._notify_interrupt(session_id)

    def add_interrupt_listener(self, listener: Listener) -> Callable[[], None]:
        """Call `listener(session_id)` soon after any process raises a flag; returns a remover."""
        remove = super().add_interrupt_listener(listener)
        self._ensure_polling()
        return remove

    # -- background queue (see `queue`) --------------------------------------------------------

    async def claim_queued(self, cap: int, candidates: Collection[str], now: int) -> list[str]:
        """Free slots to the candidates among the first queued rows, under the queue's lock."""
        self._check_open()
        return await self._queue.claim(cap, candidates, now)

    async def queue_entry(self, session_id: str) -> QueueEntry | None:
        """The session's queue row, if any."""
        self._check_open()
        return await self._queue.entry(session_id)

    async def queue_position(self, session_id: str) -> int | None:
        """Queued rows ahead of the session's; None unless it is queued."""
        self._check_open()
        return await self._queue.position(session_id)

    async def list_queue(self, stream_id: str) -> list[QueueEntry]:
        """The stream's queue rows, by seq."""
        self._check_open()
        return await self._queue.stream(stream_id)

    async def queue_counts(self) -> tuple[int, int]:
        """Queued and running rows."""
        self._check_open()
        return await self._queue.counts()

    # -- streams -------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def watch_stream(self, stream_id: str) -> AsyncIterator[StreamWatch]:
        """A watch on the stream, registered for wake-ups until the `async with` ends."""
        self._check_open()
        self._waiters.register(stream_id)
        try:
            yield WaitersWatch(self._waiters, stream_id, self._reads, self._ensure_polling)
        finally:
            self._waiters.release(stream_id)

    # -- wake-ups ------------------------------------------------------------------------------

    def _poll_wanted(self) -> bool:
        if not self.is_open:
            return False
        if self._listener is not None and self._listener.connected:
            return False
        return bool(self._waiters) or bool(self._interrupt_listeners)

    def _ensure_polling(self) -> None:
        if self._poller is not None and self._poll_wanted():
            self._poller.ensure_running()

    def _on_reconnect(self) -> None:
        self._waiters.wake_all()
        # A slot freed while deaf was not heard of.
        self._notify_queue()
        if self._interrupt_listeners:
            task = asyncio.get_running_loop().create_task(self._announce_flags())
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _announce_flags(self) -> None:
        try:
            async with self._connections.acquire() as conn:
                rows = await conn.fetch(self._queries.all_flags, {})
        except DRIVER_ERRORS as exc:
            logger.warning("Could not read the interrupt flags raised while deaf: %s", exc)
            return
        for session_id, _ in rows:
            self._notify_interrupt(session_id)
