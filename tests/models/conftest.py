"""Model test fixtures: the fake OpenAI server (the suite's conftest guards the event loop)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.models.fake_openai import FakeOpenAI


@pytest.fixture
async def fake_openai() -> AsyncIterator[FakeOpenAI]:
    """A fake OpenAI-compatible server on a free loopback port, stopped after the test."""
    async with FakeOpenAI() as server:
        yield server
