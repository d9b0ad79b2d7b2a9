"""Store fixtures: the contract suite runs against every backend in `BACKENDS`.

Databases come from tests/databases.py (a fresh SQLite file, or an empty PostgreSQL database).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.store import MemoryStore, StateStore
from app.store.sql import SqlStore
from tests.databases import database_url, postgres_database

BACKENDS = ["memory", "sqlite", "postgres"]
SQL_BACKENDS = ["sqlite", "postgres"]


@pytest.fixture(params=SQL_BACKENDS)
async def sql_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A fresh, empty database on each SQL backend."""
    async with database_url(request.param, tmp_path) as url:
        yield url


@pytest.fixture
async def postgres_url() -> AsyncIterator[str]:
    """A fresh, empty PostgreSQL database."""
    async with postgres_database() as url:
        yield url


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StateStore]:
    """An open store of each backend, empty."""
    if request.param == "memory":
        async with MemoryStore() as opened:
            yield opened
        return
    async with database_url(request.param, tmp_path) as url, SqlStore(url) as sql_store:
        yield sql_store
