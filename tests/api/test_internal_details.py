"""Internal details never reach a client (issue 18, case 5): a model server's URL stays out of
`/status` and `error` chunks, a store's driver message out of every answer and `/readyz`; both
go to the server's log with the session they concern."""

from __future__ import annotations

import logging
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest

from app import define_agent
from app.agents import AgentRegistry
from app.errors import StoreError
from app.models.openai import OpenAIChatModel
from app.settings import Settings
from tests.api.conftest import read_stream, serve
from tests.api.test_http import wait_status
from tests.runtime.agents import Calls

SECRET = 'connection to server at "db.internal" (10.0.0.7), port 5432 failed: database "prod"'


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_a_model_servers_url_stays_in_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    port = closed_port()
    model = OpenAIChatModel("small", base_url=f"http://127.0.0.1:{port}/v1", timeout=2)
    agent = define_agent("asker", model=model)
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path}/m.db")
    with caplog.at_level(logging.WARNING):
        async with (
            serve(AgentRegistry([agent]), Calls(), settings) as server,
            httpx.AsyncClient(base_url=server.url, timeout=10) as client,
        ):
            await client.post(
                "/start", json={"agentType": "asker", "message": "hi", "sessionId": "u"}
            )
            status = await wait_status(client, "u", "failed")
            read = await read_stream(client, "u")
    said = f"{status['error']} {[chunk.model_dump() for chunk in read.chunks]}"
    assert status["error"].startswith("OpenAIChatModel(small): connection failed")
    assert "127.0.0.1" not in said
    assert str(port) not in said
    logged = [r.getMessage() for r in caplog.records if str(port) in r.getMessage()]
    assert logged
    assert "Session u" in logged[0]


async def test_a_store_failure_answers_its_kind_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def failing(*args: Any, **kwargs: Any) -> Any:
        raise StoreError(f"Could not read: {SECRET}")

    calls = Calls()
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path}/s.db")
    agent = define_agent("plain", model=OpenAIChatModel("small", base_url="http://127.0.0.1:1/v1"))
    with caplog.at_level(logging.ERROR):
        async with (
            serve(AgentRegistry([agent]), calls, settings) as server,
            httpx.AsyncClient(base_url=server.url, timeout=10) as client,
        ):
            store = server.runtime.store
            monkeypatch.setattr(store, "get_session", failing)
            monkeypatch.setattr(store, "find_session_by_idempotency_key", failing)
            monkeypatch.setattr(store, "ping", failing)
            status = await client.get("/status/s-1")
            ready = await client.get("/readyz")
            started = await client.post(
                "/start",
                json={"agentType": "plain", "message": "hi"},
                headers={"Idempotency-Key": "k"},
            )
    for answer, code in [
        (status, "store_error"),
        (ready, "store_unavailable"),
        (started, "store_error"),
    ]:
        assert answer.status_code == 503
        assert answer.json()["error"]["code"] == code
        assert "db.internal" not in answer.text
        assert "prod" not in answer.text
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "GET /status/s-1 (session s-1) failed: store_error" in logged
    assert logged.count("db.internal") == 3
