"""Fixtures of the operations tests: tracing into the SDK's in-memory exporter, and log capture
through the server's own handler."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from app.observability import logs, tracing
from app.store import create_store


@pytest.fixture(scope="session", autouse=True)
def _warm_sql_store() -> None:
    """Open a SQLite store once before any test's loop runs: the first opening imports Alembic
    and SQLAlchemy's dialects (a second or so) on the loop, which the loop watchdog would take
    for a blocked loop in the test that happens to be first."""

    async def open_once(folder: str) -> None:
        async with create_store(f"sqlite+aiosqlite:///{folder}/warm.db"):
            pass

    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(open_once(folder))


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on for the test (this process, every server it runs), into memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    try:
        yield exporter
    finally:
        tracing.uninstall()
        provider.shutdown()


class JsonLines:
    """The JSON lines the server's handler wrote while the test ran."""

    def __init__(self, stream: io.StringIO) -> None:
        self.stream = stream

    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.stream.getvalue().splitlines() if line]

    def about(self, session_id: str) -> list[dict[str, Any]]:
        return [line for line in self.lines() if line.get("session_id") == session_id]


@pytest.fixture
def json_logs() -> Iterator[JsonLines]:
    """Every INFO+ record of the process, as the server's JSON handler writes it."""
    stream = io.StringIO()
    handler = logs.make_handler("json", stream)
    logger = logging.getLogger()
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield JsonLines(stream)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


def by_name(finished: tuple[ReadableSpan, ...]) -> dict[str, list[ReadableSpan]]:
    """Finished spans grouped by name."""
    named: dict[str, list[ReadableSpan]] = {}
    for span in finished:
        named.setdefault(span.name, []).append(span)
    return named
