"""The `store` fixture: every contract test runs once per backend named in `BACKENDS`."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.store import MemoryStore, StateStore

BACKENDS = ["memory"]


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest) -> AsyncIterator[StateStore]:
    async with MemoryStore() as opened:
        yield opened
