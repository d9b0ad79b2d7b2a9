"""Suite-wide fixtures: every async test fails if it blocks the event loop."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator

import pytest

from tests.databases import drop_test_databases  # noqa: F401 - registers it for every test

LOOP_BLOCK_LIMIT = 0.5
"""Seconds the event loop may go without running a 10 ms heartbeat before the test fails."""


@pytest.fixture
async def loop_watchdog() -> AsyncIterator[None]:
    """Run a heartbeat beside the test and fail it if the loop stalled."""
    loop = asyncio.get_running_loop()
    worst = 0.0

    async def heartbeat() -> None:
        nonlocal worst
        while True:
            started = loop.time()
            await asyncio.sleep(0.01)
            worst = max(worst, loop.time() - started - 0.01)

    task = loop.create_task(heartbeat())
    yield
    task.cancel()
    assert worst < LOOP_BLOCK_LIMIT, f"the event loop was blocked for {worst:.3f}s"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        function = getattr(item, "function", None)
        if function is not None and inspect.iscoroutinefunction(function):
            item.fixturenames.append("loop_watchdog")  # type: ignore[attr-defined]
