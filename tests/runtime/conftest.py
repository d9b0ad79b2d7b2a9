"""Runtime fixtures: a fresh, open store of each backend (memory, SQLite, PostgreSQL)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.store import MemoryStore, StateStore, create_store
from tests.databases import database_url


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StateStore]:
    """An open, empty store of each backend."""
    if request.param == "memory":
        async with MemoryStore() as memory:
            yield memory
        return
    async with database_url(request.param, tmp_path) as url, create_store(url) as sql:
        yield sql
