"""Wake-ups: how stream watches (`watch`), interrupt and queue listeners learn of other writers.

In-process commits wake a stream's waiters and the queue's listeners directly. Other processes
are heard through PostgreSQL's LISTEN/NOTIFY on one dedicated connection, or, on SQLite (and on
PostgreSQL while that connection is down), by a poller that runs only while someone waits or
listens: it asks SQLite's `PRAGMA data_version` whether anyone committed, and only then reads
the waited streams and the raised flags. The poller does not look for freed queue slots: a
process with sessions waiting for one claims on a poll of its own (`Scheduler`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.errors import StoreClosedError
from app.store.sql.driver import ALIVE_TIMEOUT, ConnectionPool, DriverSql, RawConnection
from app.store.sql.engines import DRIVER_ERRORS
from app.store.sql.group_commit import cancel_quietly
from app.store.sql.queries import INTERRUPT_CHANNEL, QUEUE_CHANNEL, STREAM_CHANNEL, Queries
from app.store.sql.watch import StreamWaiters

logger = logging.getLogger(__name__)

LISTEN_CHECK = 5.0
"""Seconds between checks that the LISTEN connection still answers."""

DATA_VERSION = DriverSql("PRAGMA data_version", ())
"""SQLite's count of commits by other connections, as seen by this one."""


class Poller:
    """Polls the database for stream and flag changes while `wanted()` says someone cares."""

    def __init__(
        self,
        pool: ConnectionPool,
        queries: Queries,
        waiters: StreamWaiters,
        on_interrupt: Callable[[str], None],
        wanted: Callable[[], bool],
        *,
        interval: float,
    ) -> None:
        self._pool = pool
        self._q = queries
        self._waiters = waiters
        self._on_interrupt = on_interrupt
        self._wanted = wanted
        self._interval = interval
        self._task: asyncio.Task[None] | None = None
        self._flags_seen: set[tuple[str, int]] = set()

    def ensure_running(self) -> None:
        """Start polling unless it already runs."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="sql-store-poller")

    def flag_seen(self, session_id: str, requested_at: int) -> None:
        """A flag this process raised and announced itself: do not announce it again."""
        self._flags_seen.add((session_id, requested_at))

    async def close(self) -> None:
        """Stop polling."""
        await cancel_quietly(self._task)

    async def _run(self) -> None:
        while self._wanted():
            try:
                async with self._pool.acquire() as conn:
                    await self._poll(conn)
            except StoreClosedError:
                return
            except DRIVER_ERRORS as exc:
                logger.warning("Polling the store failed: %s", exc)
                await asyncio.sleep(self._interval)

    async def _poll(self, conn: RawConnection) -> None:
        sqlite = self._q.backend == "sqlite"
        version: object = None
        while self._wanted():
            if sqlite:
                current = (await conn.fetch(DATA_VERSION, {}))[0][0]
                if current != version:
                    version = current
                    await self._check(conn)
            else:
                await self._check(conn)
            await asyncio.sleep(self._interval)

    async def _check(self, conn: RawConnection) -> None:
        waited = self._waiters.waited()
        if waited:
            rows = await conn.fetch(self._q.streams_progress, {"ids": self._q.ids(waited)})
            for stream_id, last_sequence, status in rows:
                self._waiters.observe(stream_id, (last_sequence, status))
        flags = {
            (session_id, requested_at)
            for session_id, requested_at in await conn.fetch(self._q.all_flags, {})
        }
        for session_id, _ in flags - self._flags_seen:
            self._on_interrupt(session_id)
        self._flags_seen = flags


class PgListener:
    """The one connection that LISTENs for stream, interrupt and queue notifications,
    reconnecting.

    Notifications carry their sender's `origin`; the store's own are ignored, since it already
    woke its waiters and listeners itself.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        origin: str,
        on_stream: Callable[[str, int | None, str | None], None],
        on_interrupt: Callable[[str], None],
        on_queue: Callable[[], None],
        on_reconnect: Callable[[], None],
        on_lost: Callable[[], None],
    ) -> None:
        self._engine = engine
        self._origin = origin
        self._on_stream = on_stream
        self._on_interrupt = on_interrupt
        self._on_queue = on_queue
        self._on_reconnect = on_reconnect
        self._on_lost = on_lost
        self._connection: AsyncConnection | None = None
        self._raw: Any = None
        """The driver's own connection under `_connection`."""
        self._lost = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.connected = False
        """Whether notifications are being heard right now."""

    async def start(self) -> None:
        """Listen (raising if the database cannot be reached), then keep listening."""
        await self._listen()
        self._task = asyncio.create_task(self._supervise(), name="sql-store-listener")

    async def close(self) -> None:
        """Stop listening, close the connection and dispose of its engine."""
        await cancel_quietly(self._task)
        await self._disconnect()
        await self._engine.dispose()

    async def _listen(self) -> None:
        self._lost = asyncio.Event()
        connection = await self._engine.connect()
        try:
            raw = (await connection.get_raw_connection()).driver_connection
            assert raw is not None
            raw.add_termination_listener(self._terminated)
            await raw.add_listener(STREAM_CHANNEL, self._notified)
            await raw.add_listener(INTERRUPT_CHANNEL, self._notified)
            await raw.add_listener(QUEUE_CHANNEL, self._notified)
        except BaseException:
            with contextlib.suppress(*DRIVER_ERRORS):
                await connection.invalidate()
            raise
        self._connection = connection
        self._raw = raw
        self.connected = True

    async def _alive(self) -> bool:
        raw = self._raw
        if raw is None:
            return False
        try:
            async with asyncio.timeout(ALIVE_TIMEOUT):
                # On the driver's connection: SQLAlchemy's would begin a transaction and leave
                # it open, which the server ends after its idle-in-transaction timeout.
                await raw.execute("SELECT 1")
        except DRIVER_ERRORS:
            return False
        return True

    async def _disconnect(self) -> None:
        self.connected = False
        connection, self._connection, self._raw = self._connection, None, None
        if connection is not None:
            with contextlib.suppress(*DRIVER_ERRORS):
                await connection.invalidate()

    async def _supervise(self) -> None:
        delay = 0.05
        while True:
            try:
                async with asyncio.timeout(LISTEN_CHECK):
                    await self._lost.wait()
            except TimeoutError:
                # An idle connection whose network went away stays open, hearing nothing:
                # only a query that gets no answer tells.
                if await self._alive():
                    continue
                logger.warning("The LISTEN connection stopped answering; reconnecting")
            await self._disconnect()
            self._on_lost()
            try:
                await self._listen()
            except DRIVER_ERRORS as exc:
                logger.warning("LISTEN connection lost, retrying in %.2fs: %s", delay, exc)
                self._lost.set()
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            delay = 0.05
            self._on_reconnect()

    def _terminated(self, _connection: Any) -> None:
        self.connected = False
        self._lost.set()

    def _notified(self, _connection: Any, _pid: int, channel: str, payload: str) -> None:
        if channel == STREAM_CHANNEL:
            origin, _, changes = payload.partition("\n")
            if origin == self._origin:
                return
            for change in changes.split("\n"):
                sequence, status, stream_id = change.split(" ", 2)
                self._on_stream(
                    stream_id,
                    int(sequence) if sequence.isdigit() else None,
                    None if status == "-" else status,
                )
        elif channel == QUEUE_CHANNEL:
            if payload != self._origin:
                self._on_queue()
        else:
            origin, _, session_id = payload.partition(" ")
            if origin != self._origin:
                self._on_interrupt(session_id)
