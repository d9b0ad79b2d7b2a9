"""The demo registry served over HTTP on a fresh SQLite database, for the demo trees' tests."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from app.demo import build_registry
from app.protocol import Chunk
from app.settings import Settings
from tests.api.conftest import read_stream, serve
from tests.databases import database_url
from tests.runtime.agents import Calls


@contextlib.asynccontextmanager
async def demo_client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the demo agents (brains without latency) served on SQLite."""
    async with database_url("sqlite", tmp_path) as url:
        settings = Settings(database_url=url, stream_heartbeat=0.2, stream_poll=0.2)
        async with (
            serve(build_registry(latency=0), Calls(), settings) as server,
            httpx.AsyncClient(base_url=server.url, timeout=20) as client,
        ):
            yield client


async def start(client: httpx.AsyncClient, agent: str, session: str, message: str) -> None:
    answer = await client.post(
        "/start", json={"agentType": agent, "sessionId": session, "message": message}
    )
    assert answer.status_code == 201, answer.text


async def resume(client: httpx.AsyncClient, session: str, body: dict[str, Any]) -> None:
    answer = await client.post(f"/resume/{session}", json=body)
    assert answer.status_code == 200, answer.text


async def follow(client: httpx.AsyncClient, stream: str, chunks: list[Chunk]) -> str:
    """Read the stream after `chunks` to its end, add what came to them, and give the end's
    status."""
    read = await read_stream(client, stream, params={"fromSequence": len(chunks)})
    chunks += read.chunks
    assert read.end is not None
    status = read.end["status"]
    assert isinstance(status, str)
    return status


async def status(client: httpx.AsyncClient, session: str) -> dict[str, Any]:
    answer = await client.get(f"/status/{session}")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert isinstance(body, dict)
    return body
