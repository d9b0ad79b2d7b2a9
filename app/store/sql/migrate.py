"""Runs the Alembic history programmatically, so a store is at the current schema when it opens.

Migrations run in one transaction on the connection they are given (SQLite and PostgreSQL both
have transactional DDL), under a lock: `BEGIN IMMEDIATE` on SQLite and an advisory lock on
PostgreSQL, so replicas starting together migrate once and the others wait and find it done.
By hand: `DATABASE_URL=... .venv/bin/alembic upgrade head` from the repository's root.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine

from app.errors import StoreError
from app.store.base import DatabaseTimeouts
from app.store.sql.engines import Backend, create_engine, use_wal

MIGRATIONS_CANDIDATES = (
    Path(__file__).resolve().parent / "migrations",
    Path(__file__).resolve().parents[3] / "migrations",
    Path.cwd() / "migrations",
)
"""Where the Alembic script directory may be: inside the installed package (the wheel ships it
there), beside the `app` package in a checkout, or in the working directory."""


def migrations_dir() -> Path:
    """The Alembic script directory (one history for both backends)."""
    for candidate in MIGRATIONS_CANDIDATES:
        if (candidate / "env.py").is_file():
            return candidate
    looked = ", ".join(str(candidate) for candidate in MIGRATIONS_CANDIDATES)
    raise StoreError(f"The store's Alembic migrations were not found (looked in {looked})")


MIGRATION_LOCK_KEY = 0x5A_67_53_74
"""The PostgreSQL advisory lock that serialises migrations across processes."""


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic configuration for the store's history, bound to `connection` if given."""
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


async def run_locked(
    engine: AsyncEngine, backend: Backend, work: Callable[[Connection], None]
) -> None:
    """Run `work` on a connection in one transaction that holds the migration lock."""
    async with engine.begin() as connection:
        if backend == "postgresql":
            await connection.execute(
                text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY}
            )
        await connection.run_sync(work)


def run_off_loop(url: URL, backend: Backend, work: Callable[[Connection], None]) -> None:
    """Run `work` under the migration lock on a connection of its own, in this thread's own
    event loop (call it in a worker thread: see `upgrade`)."""

    async def locked() -> None:
        # No statement timeout: a migration may rewrite a large table.
        engine = create_engine(
            url, backend, pooled=False, timeouts=DatabaseTimeouts(statement=None)
        )
        try:
            if backend == "sqlite":
                await use_wal(engine)
            await run_locked(engine, backend, work)
        finally:
            await engine.dispose()

    asyncio.run(locked())


async def upgrade(url: URL, backend: Backend, revision: str = "head") -> None:
    """Migrate the database at `url` up to `revision`.

    Alembic works synchronously (loading scripts, rendering DDL), so it runs in a worker thread
    with its own event loop and connection, and never stalls the caller's loop.
    """

    def work(connection: Connection) -> None:
        command.upgrade(alembic_config(connection), revision)

    await asyncio.to_thread(run_off_loop, url, backend, work)


async def downgrade(url: URL, backend: Backend, revision: str) -> None:
    """Migrate the database at `url` down to `revision` (`base` empties it), off the loop."""

    def work(connection: Connection) -> None:
        command.downgrade(alembic_config(connection), revision)

    await asyncio.to_thread(run_off_loop, url, backend, work)
