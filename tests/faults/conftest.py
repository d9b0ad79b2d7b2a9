"""Fixtures of the fault-injection suite, and its `long` marker.

Tests marked `long` (a server restarted after 30 seconds, ...) run only when `FAULT_LONG` is
set (`make faults` sets it); otherwise they are deselected, not skipped, so the ordinary run
stays within its time budget.
"""

from __future__ import annotations

import gc
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from app.store import MemoryStore, StateStore, create_store
from tests.databases import database_url

BACKENDS = ["memory", "sqlite", "postgres"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "long: runs for tens of seconds; only with FAULT_LONG=1 (make faults)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("FAULT_LONG"):
        return
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        (dropped if item.get_closest_marker("long") else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Collect the garbage a test leaves while the test is still the one running. A failed run's
    task that nobody awaited logs "Task exception was never retrieved" from its finalizer; run
    while pytest parses a source file to report a failure, that trips a CPython 3.11 bug
    ("SystemError: AST constructor recursion depth mismatch") and turns the failure into an
    INTERNALERROR."""
    yield
    gc.collect()


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StateStore]:
    """An open, empty store of each backend."""
    if request.param == "memory":
        async with MemoryStore() as memory:
            yield memory
        return
    async with database_url(request.param, tmp_path) as url, create_store(url) as sql:
        yield sql
