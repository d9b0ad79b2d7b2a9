"""Engines for the two backends, and the one place driver errors become store errors.

SQLite gets a busy timeout and `synchronous=NORMAL` on every connection, and WAL once per file
(`use_wal`, before migrating: the mode stays with the file); the sqlite3 module never begins
transactions by itself: statements run in autocommit unless the store (or
SQLAlchemy, for migrations) begins one, with `BEGIN IMMEDIATE`, so a writer takes the database's
write lock up front instead of failing to upgrade a read lock later.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import asyncpg  # type: ignore[import-untyped]
import pydantic_core
from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import ArgumentError, DataError, IntegrityError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from app.errors import (
    AgentServerError,
    DefinitionError,
    StoreRefusedError,
    StoreUnavailableError,
    WriteConflictError,
)
from app.store.base import DatabaseTimeouts

Backend = Literal["sqlite", "postgresql"]
"""Which database a URL names."""

SQLITE_BUSY_TIMEOUT_MS = 10_000
"""How long a SQLite connection waits for another process's write lock before failing."""

DRIVER_ERRORS: tuple[type[BaseException], ...] = (
    SQLAlchemyError,
    OSError,
    TimeoutError,
    sqlite3.Error,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
)
"""What the drivers raise: caught only at the store's boundary and turned into `StoreError`."""


INTEGRITY_ERRORS: tuple[type[BaseException], ...] = (
    IntegrityError,
    sqlite3.IntegrityError,
    asyncpg.IntegrityConstraintViolationError,
)
"""A unique key or other constraint refused a write: what a concurrent writer's conflict raises."""

REFUSALS: tuple[type[BaseException], ...] = (
    DataError,
    sqlite3.DataError,
    asyncpg.DataError,
    asyncpg.ProgramLimitExceededError,
)
"""The database refused the values themselves: trying again would be refused again."""


def parse_url(database_url: str) -> tuple[URL, Backend]:
    """The URL and its backend; a clear `DefinitionError` for anything but the two drivers."""
    try:
        url = make_url(database_url)
    except ArgumentError as exc:
        raise DefinitionError(f"Invalid database URL: {exc}") from exc
    if url.drivername == "sqlite+aiosqlite":
        database = url.database or ""
        if database in ("", ":memory:") or url.query.get("mode") == "memory":
            raise DefinitionError(
                "An in-memory SQLite database lives in one connection and cannot hold the "
                "store: use memory:// or a file path (sqlite+aiosqlite:///path/to/file.db)"
            )
        return url, "sqlite"
    if url.drivername == "postgresql+asyncpg":
        return url, "postgresql"
    raise DefinitionError(
        f"Unsupported database driver {url.drivername!r}: use sqlite+aiosqlite:///path "
        "or postgresql+asyncpg://user@host/db"
    )


def ensure_sqlite_folder(url: URL) -> None:
    """Create the SQLite file's parent folder if it is missing."""
    database = url.database or ""
    if database.startswith("file:"):
        return
    Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)


def _json_dumps(value: Any) -> str:
    return pydantic_core.to_json(value).decode()


def client_timeout(statement: float) -> float:
    """Seconds the client waits for a statement before it gives up on the server itself: the
    server's own timeout and as much again, at most 5 s more."""
    return statement + min(statement, 5.0)


def create_engine(
    url: URL,
    backend: Backend,
    *,
    pool_size: int = 5,
    pooled: bool = True,
    timeouts: DatabaseTimeouts | None = None,
) -> AsyncEngine:
    """An engine for `url`; an engine not `pooled` opens a connection per use (the LISTEN
    connection, migrations). `timeouts` bound PostgreSQL's connects and statements (their
    defaults, without).

    On SQLite, transactions SQLAlchemy begins (the migrations') start with `BEGIN IMMEDIATE`.
    """
    timeouts = timeouts or DatabaseTimeouts()
    options: dict[str, Any] = {
        "json_serializer": _json_dumps,
        "json_deserializer": pydantic_core.from_json,
    }
    if not pooled:
        options["poolclass"] = NullPool
    else:
        options["pool_size"] = pool_size
        options["max_overflow"] = 2
    if backend == "postgresql":
        # The store's statements are written so their best plan does not depend on the values
        # (keys probed one by one), which is the plan PostgreSQL settles on after five runs of
        # a prepared statement. Until then it plans each run for its values, parsing the JSON
        # parameters of a group's write at plan time: milliseconds for a group of a few hundred
        # rows, and a busy server prepares each statement shape on every pooled connection.
        settings = {"plan_cache_mode": "force_generic_plan", **TCP_KEEPALIVES}
        connect_args: dict[str, Any] = {"server_settings": settings, "timeout": timeouts.connect}
        if timeouts.statement is not None:
            milliseconds = str(int(timeouts.statement * 1000))
            settings["statement_timeout"] = milliseconds
            settings["idle_in_transaction_session_timeout"] = str(int(milliseconds) * 2)
            connect_args["command_timeout"] = client_timeout(timeouts.statement)
        options["connect_args"] = connect_args
    engine = create_async_engine(url, **options)
    if backend == "sqlite":
        _configure_sqlite(engine)
    return engine


TCP_KEEPALIVES = {
    "tcp_keepalives_idle": "10",
    "tcp_keepalives_interval": "5",
    "tcp_keepalives_count": "3",
}
"""The server probes a connection idle for 10 s and drops it after 3 unanswered probes: a client
that vanished (a crash, a partition) stops holding its locks within about 25 s."""


def _configure_sqlite(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA synchronous=NORMAL")
        finally:
            cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")


async def use_wal(engine: AsyncEngine) -> None:
    """Put the engine's SQLite file in WAL mode. Replicas opening a new file together race for
    the exclusive lock the switch takes, and SQLite may answer the loser "database is locked" at
    once instead of through the busy timeout: the switch is retried for as long as that timeout.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SQLITE_BUSY_TIMEOUT_MS / 1000
    pause = 0.01
    while True:
        try:
            async with engine.connect() as connection:
                raw = (await connection.get_raw_connection()).driver_connection
                assert raw is not None
                cursor = await raw.execute("PRAGMA journal_mode=WAL")
                await cursor.close()
            return
        except DRIVER_ERRORS as exc:
            if "locked" not in str(exc) or loop.time() > deadline:
                raise
        await asyncio.sleep(pause)
        pause = min(pause * 2, 0.2)


@contextlib.contextmanager
def translate_errors(action: str, *, conflict: str | None = None) -> Iterator[None]:
    """Turn a driver error into a `StoreError`: `StoreRefusedError` when the database refused
    the values, else `StoreUnavailableError` (given `conflict`, an integrity error is a
    `WriteConflictError` with that message); the project's own errors pass through."""
    try:
        yield
    except AgentServerError:
        raise
    except INTEGRITY_ERRORS as exc:
        if conflict is not None:
            raise WriteConflictError(conflict) from exc
        raise StoreRefusedError(f"Could not {action}: {_describe(exc)}") from exc
    except REFUSALS as exc:
        raise StoreRefusedError(f"Could not {action}: {_describe(exc)}") from exc
    except DRIVER_ERRORS as exc:
        raise StoreUnavailableError(f"Could not {action}: {_describe(exc)}") from exc


def _describe(exc: BaseException) -> str:
    original = getattr(exc, "orig", None) or exc
    text = str(original).strip().splitlines()
    return f"{type(original).__name__}: {text[0]}" if text else type(original).__name__
