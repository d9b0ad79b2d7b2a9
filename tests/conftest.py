"""Suite-wide fixtures: every async test fails if it blocks the event loop."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator, Iterator

import pytest

from tests.databases import drop_test_databases  # noqa: F401 - registers it for every test

LOOP_BLOCK_LIMIT = 0.5
"""Seconds the event loop may go without running a 10 ms heartbeat before the test fails."""


class _Watch:
    """A test's heartbeat: when the test's call ended (`time.monotonic()`, the loop's clock),
    once it has."""

    ended: float | None = None


WATCH = pytest.StashKey[_Watch]()


@pytest.fixture
async def loop_watchdog(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    """Run a heartbeat beside the test and fail it if the loop stalled while the test ran."""
    loop = asyncio.get_running_loop()
    watch = request.node.stash[WATCH] = _Watch()
    worst = 0.0

    async def heartbeat() -> None:
        nonlocal worst
        while True:
            started = loop.time()
            await asyncio.sleep(0.01)
            # After the call, the loop stands still while pytest finishes it (its reports, the
            # fault suite's garbage collection): that is not the test's doing.
            now = loop.time() if watch.ended is None else min(loop.time(), watch.ended)
            worst = max(worst, now - started - 0.01)
            if watch.ended is not None:
                return

    task = loop.create_task(heartbeat())
    yield
    task.cancel()
    assert worst < LOOP_BLOCK_LIMIT, f"the event loop was blocked for {worst:.3f}s"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Tell the test's heartbeat its call is over, so the gap until its teardown is not counted."""
    yield
    ended = time.monotonic()
    watch = item.stash.get(WATCH, None)
    if watch is not None:
        watch.ended = ended


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        function = getattr(item, "function", None)
        if function is not None and inspect.iscoroutinefunction(function):
            item.fixturenames.append("loop_watchdog")  # type: ignore[attr-defined]
