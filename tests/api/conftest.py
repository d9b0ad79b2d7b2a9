"""A real uvicorn server on loopback per test, over SQLite or PostgreSQL, and an SSE reader."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from httpx_sse import aconnect_sse

from app.agents import AgentRegistry
from app.api import create_app
from app.protocol import Chunk, chunk_from_json
from app.runtime import AgentRuntime
from app.settings import Settings
from tests.databases import database_url
from tests.runtime.agents import Calls, adder, delegator

LATENCY = 0.05
"""Model latency of the test tree: long enough that a run is still going when a test acts."""


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    """The store a test's server runs on, each in turn (a module may narrow the list)."""
    return str(request.param)


@dataclass
class Server:
    """A running server: its base URL, its runtime and the calls its agents made."""

    url: str
    runtime: AgentRuntime
    calls: Calls
    uvicorn: uvicorn.Server = field(repr=False)


def tree_registry(calls: Calls, latency: float = LATENCY) -> AgentRegistry:
    """A parent delegating to 3 children in parallel (8 model calls, 3 `add` calls)."""
    return AgentRegistry([delegator(calls, adder(calls, latency=latency), latency=latency)])


def free_port() -> int:
    """A loopback port nothing listens on now (for a server that must come back on it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.asynccontextmanager
async def serve(
    registry: AgentRegistry, calls: Calls, settings: Settings, *, port: int = 0
) -> AsyncIterator[Server]:
    """Serve `create_app(registry)` with uvicorn on loopback (a free port unless one is given)
    until the block ends."""
    app = create_app(registry, settings=settings)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    task = asyncio.get_running_loop().create_task(server.serve())
    while not server.started:
        assert not task.done(), "the server did not start"
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield Server(f"http://127.0.0.1:{port}", app.state.runtime, calls, server)
    finally:
        server.should_exit = True
        await task


@pytest.fixture(params=["sqlite", "postgres"])
async def server(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Server]:
    """The test tree served over a fresh database of each SQL backend."""
    calls = Calls()
    async with database_url(request.param, tmp_path) as url:
        settings = Settings(database_url=url, stream_heartbeat=0.2, stream_poll=0.2)
        async with serve(tree_registry(calls), calls, settings) as running:
            yield running


@pytest.fixture
async def client(server: Server) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as opened:
        yield opened


@dataclass
class Read:
    """What one SSE connection delivered."""

    chunks: list[Chunk]
    ids: list[str]
    end: dict[str, Any] | None


async def read_stream(
    client: httpx.AsyncClient,
    stream_id: str,
    *,
    headers: dict[str, str] | None = None,
    params: dict[str, Any] | None = None,
    stop_after: int | None = None,
) -> Read:
    """Read `/stream/{stream_id}` to its end event, or hang up after `stop_after` chunks."""
    read = Read([], [], None)
    async with aconnect_sse(
        client, "GET", f"/stream/{stream_id}", headers=dict(headers or {}), params=params
    ) as source:
        source.response.raise_for_status()
        async for event in source.aiter_sse():
            if not event.data:
                continue  # a heartbeat comment (the SSE spec dispatches no event for it)
            if event.event == "end":
                read.end = json.loads(event.data)
                break
            read.chunks.append(chunk_from_json(event.data))
            read.ids.append(event.id)
            if stop_after is not None and len(read.chunks) == stop_after:
                break
    return read
