"""Model test fixtures: the fake OpenAI server, and a guard against a blocked event loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tests.models.fake_openai import FakeOpenAI

MAX_LOOP_LAG = 0.5
"""Seconds the event loop may go without running a ready callback before a test fails."""


@pytest.fixture
async def fake_openai() -> AsyncIterator[FakeOpenAI]:
    """A fake OpenAI-compatible server on a free loopback port, stopped after the test."""
    async with FakeOpenAI() as server:
        yield server


@pytest.fixture(autouse=True)
async def _loop_not_blocked() -> AsyncIterator[None]:
    """Fail the test when something blocks the event loop (a heartbeat comes in late)."""
    loop = asyncio.get_running_loop()
    worst = 0.0

    async def heartbeat() -> None:
        nonlocal worst
        while True:
            before = loop.time()
            await asyncio.sleep(0.01)
            worst = max(worst, loop.time() - before - 0.01)

    task = asyncio.create_task(heartbeat())
    yield
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert worst < MAX_LOOP_LAG, f"the event loop was blocked for {worst:.3f}s"
