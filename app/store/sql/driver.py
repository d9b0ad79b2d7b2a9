"""Runs the store's compiled SQL on the drivers' own connections, held open in a small pool.

The engine opens each connection (so SQLite's pragmas and asyncpg's JSON codecs are set as for
any SQLAlchemy connection) and the pool keeps it: checking a connection out of SQLAlchemy's
pool and running a statement through its async layer cost about 0.3 ms of CPU, several times
the driver's own cost, and the store runs several statements per commit. Statements run in
autocommit unless inside `transaction()`, which begins with `BEGIN IMMEDIATE` on SQLite.
"""

from __future__ import annotations

import asyncio
import contextlib
import operator
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.errors import StoreClosedError
from app.store.sql.engines import DRIVER_ERRORS, INTEGRITY_ERRORS, Backend

_BREAKING: tuple[type[BaseException], ...] = (*DRIVER_ERRORS, asyncio.CancelledError)

Row = Sequence[Any]
"""A result row, by position."""

IDLE_CHECK = 10.0
"""Seconds a connection may sit idle before it is checked before its next use: a network that
dropped meanwhile leaves it half-open, and a statement on it would wait for its timeout."""

ALIVE_TIMEOUT = 2.0
"""Seconds that check waits for an answer."""

CLOSE_TIMEOUT = 2.0
"""Seconds a connection may take to close politely before it is terminated."""


class DriverSql:
    """One statement in the driver's SQL, and how to turn a mapping into its positional args."""

    def __init__(self, sql: str, names: Sequence[str]) -> None:
        self.sql = sql
        self.names = tuple(names)
        self.args: Callable[[Mapping[str, Any]], tuple[Any, ...]]
        if not self.names:
            self.args = lambda _params: ()
        elif len(self.names) == 1:
            name = self.names[0]
            self.args = lambda params: (params[name],)
        else:
            self.args = operator.itemgetter(*self.names)


class RawConnection:
    """A driver connection (asyncpg or aiosqlite) with one API for both."""

    def __init__(self, holder: AsyncConnection, raw: Any, backend: Backend) -> None:
        self.holder = holder
        self._raw = raw
        self._pg = backend == "postgresql"
        self.used_at = time.monotonic()
        """When the connection was last given back to the pool."""

    @property
    def closed(self) -> bool:
        """Whether the server closed the connection (PostgreSQL; a SQLite file never does)."""
        return bool(self._pg and self._raw.is_closed())

    async def alive(self, timeout: float) -> bool:
        """Whether the server answers a trivial query within `timeout` seconds (a connection
        can be half-open: dead, and silent about it, until something is sent)."""
        if not self._pg:
            return True  # a SQLite file does not go half-open
        try:
            async with asyncio.timeout(timeout):
                await self._raw.execute("SELECT 1")
        except DRIVER_ERRORS:
            return False
        return True

    def terminate(self) -> None:
        """Close the connection at once, without a goodbye the server may never answer."""
        if self._pg:
            self._raw.terminate()

    async def fetch(self, statement: DriverSql, params: Mapping[str, Any]) -> list[Row]:
        """The statement's rows."""
        args = statement.args(params)
        if self._pg:
            return list(await self._raw.fetch(statement.sql, *args))
        return list(await self._raw.execute_fetchall(statement.sql, args))

    async def execute(self, statement: DriverSql, params: Mapping[str, Any]) -> int:
        """Run the statement; how many rows it changed."""
        args = statement.args(params)
        if self._pg:
            status: str = await self._raw.execute(statement.sql, *args)
            count = status.rpartition(" ")[2]
            return int(count) if count.isdigit() else 0
        cursor = await self._raw.execute(statement.sql, args)
        try:
            return int(cursor.rowcount)
        finally:
            await cursor.close()

    async def many(self, statement: DriverSql, rows: Sequence[Mapping[str, Any]]) -> None:
        """Run the statement once per row."""
        args = statement.args
        await self._raw.executemany(statement.sql, [args(row) for row in rows])

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """A transaction: committed when the block ends, rolled back if it raises."""
        if self._pg:
            async with self._raw.transaction():
                yield
            return
        await self._raw.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            await asyncio.shield(self._raw.rollback())
            raise
        await self._raw.commit()


class ConnectionPool:
    """At most `size` open connections, lent one at a time; one that failed is thrown away."""

    def __init__(self, engine: AsyncEngine, backend: Backend, *, size: int) -> None:
        self._engine = engine
        self._backend = backend
        self._size = size
        self._idle: list[RawConnection] = []
        self._open = 0
        self._freed = asyncio.Condition()
        self._closed = False

    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncIterator[RawConnection]:
        """Lend a connection for the block."""
        connection = await self._take()
        try:
            yield connection
        except INTEGRITY_ERRORS:
            await self._give_back(connection)
            raise
        except _BREAKING:
            await self._discard(connection)
            raise
        except BaseException:
            await self._give_back(connection)
            raise
        await self._give_back(connection)

    async def close(self) -> None:
        """Close every idle connection; connections still lent are closed on return."""
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            try:
                async with asyncio.timeout(CLOSE_TIMEOUT):
                    await self._close(connection)
            except TimeoutError:
                connection.terminate()
        async with self._freed:
            self._freed.notify_all()

    async def _take(self) -> RawConnection:
        while True:
            if self._closed:
                raise StoreClosedError("The store's connections are closed")
            if self._idle:
                connection = self._idle.pop()
                if not connection.closed and (
                    time.monotonic() - connection.used_at < IDLE_CHECK
                    or await connection.alive(ALIVE_TIMEOUT)
                ):
                    return connection
                await self._discard(connection)
                continue
            if self._open < self._size:
                self._open += 1
                try:
                    return await self._connect()
                except BaseException:
                    self._open -= 1
                    raise
            async with self._freed:
                await self._freed.wait()

    async def _connect(self) -> RawConnection:
        holder = await self._engine.connect()
        try:
            raw = (await holder.get_raw_connection()).driver_connection
        except BaseException:
            await asyncio.shield(holder.close())
            raise
        return RawConnection(holder, raw, self._backend)

    async def _give_back(self, connection: RawConnection) -> None:
        if self._closed:
            await self._close(connection)
            return
        connection.used_at = time.monotonic()
        self._idle.append(connection)
        async with self._freed:
            self._freed.notify()

    async def _discard(self, connection: RawConnection) -> None:
        with contextlib.suppress(*DRIVER_ERRORS):
            await asyncio.shield(connection.holder.invalidate())
        self._open -= 1
        async with self._freed:
            self._freed.notify()

    async def _close(self, connection: RawConnection) -> None:
        self._open -= 1
        with contextlib.suppress(*DRIVER_ERRORS):
            await asyncio.shield(connection.holder.close())
