"""What a page on another origin needs: CORS, stream tokens for `EventSource` under an API key,
named SSE events, an end a browser stops reconnecting after, and docs that load offline."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from app.api.tokens import StreamTokens
from app.settings import Settings
from tests.api.conftest import Server, read_stream, serve, tree_registry
from tests.runtime.agents import Calls

KEY = "s3cret"
ORIGIN = "http://page.example"
START = {"agentType": "parent", "message": "sum things"}


@pytest.fixture
async def locked(tmp_path: Path) -> AsyncIterator[Server]:
    """The test tree behind an API key, open to pages of `ORIGIN`."""
    calls = Calls()
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'locked.db'}",
        api_key=KEY,
        cors_origins=f"{ORIGIN}, http://other.example",
        stream_heartbeat=0.2,
        stream_poll=0.2,
    )
    async with serve(tree_registry(calls), calls, settings) as server:
        yield server


def keyed(server: Server) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=server.url, timeout=10, headers={"Authorization": f"Bearer {KEY}"}
    )


async def test_a_preflight_is_answered_without_the_key(locked: Server) -> None:
    async with httpx.AsyncClient(base_url=locked.url, timeout=10) as client:
        preflight = await client.options(
            "/start",
            headers={
                "Origin": ORIGIN,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type",
            },
        )
        refused = await client.post("/start", json=START, headers={"Origin": ORIGIN})
        stranger = await client.options(
            "/start",
            headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"},
        )
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == ORIGIN
    assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
    # A refusal still carries CORS headers, so the page can read why.
    assert refused.status_code == 401
    assert refused.headers["access-control-allow-origin"] == ORIGIN
    assert refused.json()["error"]["code"] == "unauthorized"
    assert stranger.status_code == 400
    assert "access-control-allow-origin" not in stranger.headers


async def test_a_stream_token_opens_its_stream_only(locked: Server) -> None:
    async with keyed(locked) as client:
        await client.post("/start", json={**START, "sessionId": "t1"})
        await client.post("/start", json={**START, "sessionId": "t2"})
        minted = await client.post("/stream/t1/token")
        unknown = await client.post("/stream/nope/token")
    assert minted.status_code == 200
    body = minted.json()
    assert set(body) == {"streamId", "token", "expiresAt"}
    assert body["streamId"] == "t1"
    assert unknown.status_code == 404
    token = body["token"]
    async with httpx.AsyncClient(base_url=locked.url, timeout=10) as anonymous:
        read = await read_stream(anonymous, "t1", params={"token": token})
        other = await anonymous.get("/stream/t2", params={"token": token})
        status = await anonymous.get("/status/t1", params={"token": token})
        mint = await anonymous.post("/stream/t1/token")
        expired_token, _ = locked_tokens().mint("t1", now_ms=0)
        expired = await anonymous.get("/stream/t1", params={"token": expired_token})
    assert read.end == {"status": "completed"}
    assert [c.sequence for c in read.chunks] == list(range(1, len(read.chunks) + 1))
    assert (other.status_code, status.status_code, mint.status_code) == (401, 401, 401)
    assert expired.status_code == 401


def locked_tokens() -> StreamTokens:
    return StreamTokens.for_api_key(KEY, ttl_seconds=600)


def test_tokens_are_bound_to_the_key_the_stream_and_the_time() -> None:
    tokens = locked_tokens()
    token, expires = tokens.mint("s", now_ms=1_000)
    assert expires == 601_000
    assert tokens.check(token, "s", now_ms=601_000)
    assert not tokens.check(token, "s", now_ms=601_001)
    assert not tokens.check(token, "t", now_ms=1_000)
    assert not StreamTokens.for_api_key("other", ttl_seconds=600).check(token, "s", now_ms=1_000)
    assert not tokens.check("garbage", "s", now_ms=1_000)
    # Without an API key tokens still mint and check (with a key of this process).
    free = StreamTokens.for_api_key(None, ttl_seconds=1)
    assert free.check(free.mint("s")[0], "s")


async def test_docs_and_console_load_without_the_key_or_a_cdn(locked: Server) -> None:
    async with httpx.AsyncClient(base_url=locked.url, timeout=10) as client:
        docs = await client.get("/docs")
        script = await client.get("/docs/assets/swagger-ui-bundle.js")
        styles = await client.get("/docs/assets/swagger-ui.css")
        document = await client.get("/openapi.json")
        console = await client.get("/console")
        script_of_console = await client.get("/console/console.js")
        agents = await client.get("/agents")
    assert docs.status_code == 200
    assert "/docs/assets/swagger-ui-bundle.js" in docs.text
    assert "cdn" not in docs.text.lower()
    assert script.status_code == 200
    assert script.headers["content-type"].startswith(("text/javascript", "application/javascript"))
    assert styles.status_code == 200
    assert document.status_code == 200
    assert console.status_code == 200
    assert '<script src="/console/console.js">' in console.text
    assert script_of_console.status_code == 200
    assert "requestAnimationFrame" in script_of_console.text
    assert agents.status_code == 401


async def test_named_events_carry_the_chunk_type(server: Server) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        await client.post("/start", json={**START, "sessionId": "n1"})
        plain = await read_stream(client, "n1")
        async with client.stream("GET", "/stream/n1", params={"events": "named"}) as response:
            text = (await response.aread()).decode()
        bad = await client.get("/stream/n1", params={"events": "loud"})
    events = [block for block in text.split("\r\n\r\n") if "data:" in block]
    names = [line[7:] for block in events for line in block.split("\r\n") if line[:7] == "event: "]
    assert names == [chunk.type for chunk in plain.chunks] + ["end"]
    assert bad.status_code == 422


async def test_a_reconnect_after_the_end_is_a_204(server: Server) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        await client.post("/start", json={**START, "sessionId": "e1"})
        async with client.stream("GET", "/stream/e1") as response:
            text = (await response.aread()).decode()
        last = text.rstrip("\r\n").split("\r\n\r\n")[-1].split("\r\n")
        end_id = next(line[4:] for line in last if line.startswith("id: "))
        after_end = await client.get("/stream/e1", headers={"Last-Event-ID": end_id})
        # A client that missed the end (it had the last chunk only) still gets it.
        sequence = int(end_id.removesuffix("-end"))
        missed = await read_stream(client, "e1", headers={"Last-Event-ID": str(sequence)})
        # A session continued with a new message streams again after the same id.
        await client.post("/resume/e1", json={"message": "again"})
        again = await read_stream(client, "e1", headers={"Last-Event-ID": end_id})
    assert "event: end" in last
    assert end_id == f"{sequence}-end"
    assert after_end.status_code == 204
    assert after_end.content == b""
    assert (missed.chunks, missed.end) == ([], {"status": "completed"})
    assert again.chunks[0].sequence == sequence + 1
    assert again.end == {"status": "completed"}


async def test_origins_are_not_allowed_by_default(server: Server) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        answer = await client.get("/healthz", headers={"Origin": ORIGIN})
        preflight = await client.options(
            "/start", headers={"Origin": ORIGIN, "Access-Control-Request-Method": "POST"}
        )
    assert "access-control-allow-origin" not in answer.headers
    assert preflight.status_code == 405
    await asyncio.sleep(0)
