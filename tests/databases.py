"""Test databases: a fresh SQLite file, or an empty PostgreSQL database of its own.

PostgreSQL comes from `TEST_POSTGRES_URL` (default
`postgresql+asyncpg://postgres@127.0.0.1:5432/test`). Creating a database costs up to half a
second, so a test run creates a few, empties one (`DROP SCHEMA public CASCADE`) before lending it
to the next test, and drops them all at the end (`drop_test_databases`, registered for the whole
suite in tests/conftest.py). When that server cannot be reached the tests fail if `CI` is set, and
are skipped with the reason otherwise.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import pytest
from sqlalchemy.engine import make_url

POSTGRES_URL = os.environ.get(
    "TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)

_unreachable: list[str] = []
_probed = False


def _dsn(database: str | None = None) -> str:
    url = make_url(POSTGRES_URL).set(drivername="postgresql")
    if database is not None:
        url = url.set(database=database)
    return url.render_as_string(hide_password=False)


async def _admin() -> asyncpg.Connection:
    return await asyncpg.connect(_dsn(), timeout=5)


async def _require_postgres() -> None:
    global _probed
    if not _probed:
        _probed = True
        try:
            connection = await _admin()
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            _unreachable.append(f"{type(exc).__name__}: {exc}")
        else:
            await connection.close()
    if _unreachable:
        where = make_url(POSTGRES_URL).render_as_string(hide_password=True)
        reason = f"PostgreSQL was unreachable at {where} ({_unreachable[0]})"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI requires it (set TEST_POSTGRES_URL)")
        pytest.skip(reason)


_RUN = uuid.uuid4().hex[:8]
_created: list[str] = []
_free: list[str] = []


@contextlib.asynccontextmanager
async def postgres_database() -> AsyncIterator[str]:
    """An empty PostgreSQL database for one test, used by no one else meanwhile."""
    await _require_postgres()
    if _free:
        name = _free.pop()
        await _empty(name)
    else:
        name = f"store_test_{_RUN}_{len(_created)}"
        admin = await _admin()
        try:
            await admin.execute(f'CREATE DATABASE "{name}"')
        finally:
            await admin.close()
        _created.append(name)
    try:
        yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        _free.append(name)


async def _empty(name: str) -> None:
    connection = await asyncpg.connect(_dsn(name), timeout=5)
    try:
        await connection.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        await connection.execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    finally:
        await connection.close()


async def _drop_created() -> None:
    admin = await _admin()
    try:
        for name in _created:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


@pytest.fixture(scope="session", autouse=True)
def drop_test_databases() -> Iterator[None]:
    """Drop every database the run created, once it ends."""
    yield
    if _created:
        with concurrent.futures.ThreadPoolExecutor(1) as thread:
            thread.submit(asyncio.run, _drop_created()).result()


@contextlib.asynccontextmanager
async def database_url(backend: str, folder: Path) -> AsyncIterator[str]:
    """The URL of a fresh, empty database of `backend` ("memory", "sqlite" or "postgres")."""
    if backend == "memory":
        yield "memory://"
    elif backend == "sqlite":
        yield f"sqlite+aiosqlite:///{folder / 'db' / 'store.db'}"
    elif backend == "postgres":
        async with postgres_database() as url:
            yield url
    else:
        raise ValueError(f"not a store backend: {backend}")
