"""The Alembic history builds exactly the schema the code declares, on both SQL backends."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Connection, inspect
from sqlalchemy.engine import URL

from app.errors import DefinitionError, StoreError
from app.store import WriteBatch, create_store
from app.store.sql import SqlStore, migrate
from app.store.sql.engines import Backend, create_engine, parse_url
from app.store.sql.migrate import downgrade, upgrade
from app.store.sql.tables import metadata

REPO_ROOT = Path(__file__).resolve().parents[2]


def drift(connection: Connection) -> list[Any]:
    context = MigrationContext.configure(connection, opts={"compare_type": True})
    return list(compare_metadata(context, metadata))


def table_names(connection: Connection) -> set[str]:
    return set(inspect(connection).get_table_names())


def inspect_database(url: URL, backend: Backend, fn: Callable[[Connection], Any]) -> Any:
    async def inspect() -> Any:
        engine = create_engine(url, backend, pooled=False)
        try:
            async with engine.connect() as connection:
                return await connection.run_sync(fn)
        finally:
            await engine.dispose()

    return asyncio.run(inspect())


async def inspect_with(sql_url: str, fn: Callable[[Connection], Any]) -> Any:
    """Run `fn` on the database in a thread: reflecting a schema is synchronous work."""
    url, backend = parse_url(sql_url)
    return await asyncio.to_thread(inspect_database, url, backend, fn)


async def test_migrations_build_the_declared_schema_and_round_trip(sql_url: str) -> None:
    url, backend = parse_url(sql_url)
    if backend == "sqlite":
        Path(url.database or "").parent.mkdir(parents=True, exist_ok=True)
    assert await inspect_with(sql_url, table_names) == set()
    await upgrade(url, backend)
    declared = set(metadata.tables)
    assert await inspect_with(sql_url, table_names) == declared | {"alembic_version"}
    assert await inspect_with(sql_url, drift) == []

    await downgrade(url, backend, "base")
    assert await inspect_with(sql_url, table_names) == {"alembic_version"}

    await upgrade(url, backend)
    assert await inspect_with(sql_url, drift) == []
    await upgrade(url, backend)


async def test_the_documented_command_migrates_by_hand(sql_url: str) -> None:
    process = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).with_name("alembic")),
        "upgrade",
        "head",
        cwd=REPO_ROOT,
        env={**os.environ, "DATABASE_URL": sql_url},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, output.decode()
    assert await inspect_with(sql_url, drift) == []
    async with SqlStore(sql_url) as store:
        await store.commit(WriteBatch())


async def test_replicas_opening_together_migrate_once(sql_url: str) -> None:
    stores = [SqlStore(sql_url) for _ in range(3)]
    await asyncio.gather(*(store.__aenter__() for store in stores))
    try:
        for store in stores:
            assert store.is_open
    finally:
        await asyncio.gather(*(store.__aexit__(None, None, None) for store in stores))


async def test_an_installed_server_finds_the_migrations_in_its_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(
        REPO_ROOT / "migrations",
        tmp_path / "srv" / "migrations",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    missing = tmp_path / "site-packages" / "migrations"
    copied = tmp_path / "srv" / "migrations"
    monkeypatch.setattr(migrate, "MIGRATIONS_CANDIDATES", (missing, copied))
    async with SqlStore(f"sqlite+aiosqlite:///{tmp_path / 'one.db'}") as store:
        await store.commit(WriteBatch())
    monkeypatch.setattr(migrate, "MIGRATIONS_CANDIDATES", (missing,))
    with pytest.raises(StoreError, match="migrations were not found"):
        await SqlStore(f"sqlite+aiosqlite:///{tmp_path / 'two.db'}").__aenter__()


async def test_the_sqlite_folder_is_created(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "store.db"
    async with create_store(f"sqlite+aiosqlite:///{path}") as store:
        assert isinstance(store, SqlStore)
    assert path.exists()


async def test_an_unusable_sqlite_path_is_a_store_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    store = SqlStore(f"sqlite+aiosqlite:///{tmp_path / 'file' / 'store.db'}")
    with pytest.raises(StoreError):
        await store.__aenter__()


async def test_an_unreachable_postgres_is_a_store_error() -> None:
    store = SqlStore("postgresql+asyncpg://postgres@127.0.0.1:9/nowhere")
    with pytest.raises(StoreError) as raised:
        await store.__aenter__()
    assert "migrate the database" in str(raised.value)


@pytest.mark.parametrize(
    "url",
    [
        "sqlite+aiosqlite:///:memory:",
        "sqlite+aiosqlite://",
        "sqlite:///file.db",
        "postgresql+psycopg://localhost/db",
        "not a url",
    ],
)
def test_urls_the_store_cannot_use_are_refused_at_once(url: str) -> None:
    with pytest.raises(DefinitionError):
        SqlStore(url)


async def test_a_sqlite_store_puts_its_file_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "wal.db"
    async with create_store(f"sqlite+aiosqlite:///{path}"):
        with contextlib.closing(sqlite3.connect(path)) as connection:
            assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
