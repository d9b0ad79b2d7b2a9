"""The HTTP API against a real server: runs, streams that resume exactly, statuses, errors."""

from __future__ import annotations

import asyncio
import gc
from collections import Counter
from pathlib import Path

import httpx

from app.agents import AgentRegistry
from app.api import create_app
from app.serve import YOUNG_COLLECTION_THRESHOLD, settle_collector
from app.settings import Settings
from app.store.sql import SqlStore
from tests.api.conftest import Server, read_stream, serve
from tests.databases import database_url
from tests.runtime.agents import Calls, adder, delegator
from tests.runtime.test_client_tools import client_agent
from tests.support import check_invariants

START = {"agentType": "parent", "message": "sum things"}

assert SqlStore  # imported now, not by the first server a test starts itself: importing the SQL
# store takes the loop about 0.5 s, which the loop watchdog would count against that test.


async def wait_status(client: httpx.AsyncClient, session_id: str, status: str) -> dict[str, object]:
    for _ in range(500):
        body = (await client.get(f"/status/{session_id}")).json()
        if body["status"] == status:
            return body  # type: ignore[no-any-return]
        await asyncio.sleep(0.02)
    raise AssertionError(f"{session_id} never became {status}: {body}")


async def test_a_full_run_over_http(client: httpx.AsyncClient, server: Server) -> None:
    started = await client.post("/start", json={**START, "sessionId": "run-1"})
    assert started.status_code == 201
    assert started.json() == {
        "sessionId": "run-1",
        "streamId": "run-1",
        "status": "running",
        "agentType": "parent",
    }
    running = (await client.get("/status/run-1")).json()
    read = await read_stream(client, "run-1")
    done = await wait_status(client, "run-1", "completed")

    assert read.end == {"status": "completed"}
    assert read.ids == [str(chunk.sequence) for chunk in read.chunks]
    check_invariants(read.chunks)
    assert read.chunks[-1].type == "output"
    assert read.chunks[-1].agent_id == "run-1"
    assert running["status"] == "running"
    assert done["output"] == "results: {'total': 10}; {'total': 11}; {'total': 12}"
    assert done["lastSequence"] == len(read.chunks)
    assert [(r["subSessionId"], r["status"]) for r in done["subSessions"]] == [
        (f"run-1-sub-call-0-{i}", "completed") for i in range(3)
    ]
    assert set(done) == {
        "sessionId",
        "agentType",
        "status",
        "stepCount",
        "output",
        "error",
        "failureReason",
        "streamId",
        "lastSequence",
        "parentSessionId",
        "subSessions",
        "pendingCalls",
        "usage",
    }
    assert server.calls == {"model:parent": 2, "model:adder": 6, "add": 3}


async def test_reconnecting_with_last_event_id_gets_exactly_the_rest(
    client: httpx.AsyncClient,
) -> None:
    await client.post("/start", json={**START, "sessionId": "run-2"})
    first = await read_stream(client, "run-2", stop_after=5)
    assert first.end is None
    status = (await client.get("/status/run-2")).json()
    assert status["status"] == "running", "the run finished before the client reconnected"
    rest = await read_stream(client, "run-2", headers={"Last-Event-ID": first.ids[-1]})
    whole = await read_stream(client, "run-2")

    assert rest.end == {"status": "completed"}
    assert [c.sequence for c in first.chunks + rest.chunks] == list(range(1, len(whole.chunks) + 1))
    assert first.chunks + rest.chunks == whole.chunks
    # fromSequence means the same; Last-Event-ID wins when both are given.
    tail = await read_stream(client, "run-2", params={"fromSequence": 3})
    assert tail.chunks == whole.chunks[3:]
    both = await read_stream(
        client, "run-2", params={"fromSequence": 1}, headers={"Last-Event-ID": "7"}
    )
    assert both.chunks == whole.chunks[7:]


async def test_status_of_a_running_tree_lists_its_children(client: httpx.AsyncClient) -> None:
    await client.post("/start", json={**START, "sessionId": "run-3"})
    for _ in range(200):
        body = (await client.get("/status/run-3")).json()
        if len(body["subSessions"]) == 3:
            break
        await asyncio.sleep(0.01)
    assert body["status"] == "running"
    assert [(r["agentType"], r["status"], r["mode"]) for r in body["subSessions"]] == [
        ("adder", "running", "ephemeral")
    ] * 3
    child = (await client.get(f"/status/{body['subSessions'][0]['subSessionId']}")).json()
    assert (child["parentSessionId"], child["streamId"]) == ("run-3", "run-3")


async def test_starting_twice_starts_nothing_new(client: httpx.AsyncClient, server: Server) -> None:
    headers = {"Idempotency-Key": "order-42"}
    first = await client.post("/start", json=START, headers=headers)
    again = await client.post("/start", json=START, headers=headers)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["sessionId"] == first.json()["sessionId"]
    same_id = await client.post("/start", json={**START, "sessionId": first.json()["sessionId"]})
    assert same_id.status_code == 200
    await wait_status(client, first.json()["sessionId"], "completed")
    assert server.calls["model:parent"] == 2
    finished = await client.post("/start", json={**START, "sessionId": first.json()["sessionId"]})
    assert finished.status_code == 409
    assert finished.json()["error"]["code"] == "session_not_resumable"


async def test_interrupt_then_resume_over_http(client: httpx.AsyncClient, server: Server) -> None:
    await client.post("/start", json={**START, "sessionId": "run-4"})
    await asyncio.sleep(0.08)
    stopped = await client.post("/interrupt/run-4", json={"reason": "stop"})
    assert stopped.status_code == 202
    assert stopped.json() == {"sessionId": "run-4", "status": "running", "interruptRequested": True}
    read = await read_stream(client, "run-4")
    assert read.end == {"status": "interrupted"}
    assert read.chunks[-1].type == "interrupted"
    again = await client.post("/interrupt/run-4")
    assert again.status_code == 200
    assert again.json()["interruptRequested"] is False

    resumed = await client.post("/resume/run-4")
    assert resumed.status_code == 200
    assert resumed.json()["status"] == "running"
    busy = await client.post("/resume/run-4")
    assert busy.status_code == 409
    done = await wait_status(client, "run-4", "completed")
    whole = await read_stream(client, "run-4")
    assert whole.chunks[: len(read.chunks)] == read.chunks
    assert [c.sequence for c in whole.chunks] == list(range(1, len(whole.chunks) + 1))
    assert done["output"] == "results: {'total': 10}; {'total': 11}; {'total': 12}"

    turn = await client.post("/resume/run-4", json={"message": "once more"})
    assert turn.status_code == 200
    await wait_status(client, "run-4", "completed")


async def test_errors_have_one_shape(client: httpx.AsyncClient) -> None:
    cases = [
        (
            await client.post(
                "/start", json={"agentType": "nobody", "message": "hi", "sessionId": "x1"}
            ),
            404,
            "agent_not_found",
        ),
        (await client.get("/status/x1"), 404, "session_not_found"),
        (await client.get("/stream/x1"), 404, "stream_not_found"),
        (await client.post("/interrupt/x1"), 404, "session_not_found"),
        (await client.post("/resume/x1"), 404, "session_not_found"),
        (await client.post("/start", json={"agentType": "parent"}), 422, "invalid_request"),
        (
            await client.post("/start", json={"agentType": 3, "message": "hi"}),
            422,
            "invalid_request",
        ),
        (
            await client.post("/start", json={**START, "sessionId": "bad id!"}),
            422,
            "invalid_session_id",
        ),
        (await client.post("/start", json={**START, "surprise": 1}), 422, "invalid_request"),
        (
            await client.post(
                "/start", content=b"{not json", headers={"content-type": "application/json"}
            ),
            422,
            "invalid_json",
        ),
        (await client.get("/status/" + "x" * 201), 422, "invalid_session_id"),
        (await client.get("/stream/x1", headers={"Last-Event-ID": "five"}), 422, "invalid_request"),
        (await client.get("/stream/x1", params={"fromSequence": -1}), 422, "invalid_request"),
        (
            await client.post(
                "/start", content=b"x" * 2_000_000, headers={"content-type": "application/json"}
            ),
            413,
            "request_too_large",
        ),
        (await client.get("/nowhere"), 404, "not_found"),
        (await client.delete("/start"), 405, "method_not_allowed"),
    ]
    for response, status, code in cases:
        body = response.json()
        assert (response.status_code, body["error"]["code"]) == (status, code), body
        assert body["error"]["message"]
    # An unknown agent type never creates a session.
    assert (await client.get("/status/x1")).status_code == 404


async def test_agents_health_and_openapi(client: httpx.AsyncClient) -> None:
    agents = (await client.get("/agents")).json()
    assert [(a["name"], a["tools"]) for a in agents] == [
        ("parent", ["subagent__adder"]),
        ("adder", ["add"]),
    ]
    assert agents[1]["inputSchema"]["required"] == ["task", "a", "b"]
    assert agents[1]["outputSchema"]["properties"] == {
        "total": {"title": "Total", "type": "integer"}
    }
    assert agents[0]["outputSchema"] == {"type": "string"}
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    assert (await client.get("/readyz")).json() == {"status": "ready"}
    document = (await client.get("/openapi.json")).json()
    assert set(document["paths"]) >= {
        "/start",
        "/stream/{stream_id}",
        "/status/{session_id}",
        "/interrupt/{session_id}",
        "/resume/{session_id}",
        "/agents",
        "/healthz",
        "/readyz",
    }
    chunk = document["components"]["schemas"]["Chunk"]
    assert len(chunk["oneOf"]) == 10
    assert chunk["discriminator"]["propertyName"] == "type"


async def test_client_tools_and_approvals_over_http(tmp_path: Path) -> None:
    paid: Counter[str] = Counter()
    agent = client_agent(paid)
    async with (
        database_url("sqlite", tmp_path) as url,
        serve(AgentRegistry([agent]), Calls(), Settings(database_url=url)) as server,
        httpx.AsyncClient(base_url=server.url) as client,
    ):
        await client.post(
            "/start", json={"agentType": "shopper", "message": "buy", "sessionId": "s"}
        )
        paused = await read_stream(client, "s")
        assert paused.end == {"status": "paused_awaiting_client"}
        assert [(c.type, getattr(c, "reason", None)) for c in paused.chunks[2:]] == [
            ("tool_pending", "client"),
            ("tool_pending", "approval"),
        ]
        wrong = await client.post(
            "/resume/s", json={"toolResults": [{"toolCallId": "nope", "result": 1}]}
        )
        assert wrong.status_code == 422
        assert wrong.json()["error"]["code"] == "answers_do_not_fit"
        resumed = await client.post(
            "/resume/s",
            json={
                "toolResults": [{"toolCallId": "q", "result": "Oslo"}],
                "approvals": [{"toolCallId": "p", "approved": True}],
            },
        )
        assert resumed.status_code == 200
        done = await read_stream(client, "s", headers={"Last-Event-ID": str(len(paused.chunks))})
        status = (await client.get("/status/s")).json()
    assert done.end == {"status": "completed"}
    assert status["output"] == "city=Oslo pay=paid 5"
    assert paid == {"pay": 1}


async def test_the_server_cleans_up_finished_streams_past_their_retention(tmp_path: Path) -> None:
    calls = Calls()
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'retention.db'}",
        chunk_retention_hours=0.1 / 3600,
        retention_interval=0.05,
    )
    registry = AgentRegistry([delegator(calls, adder(calls))])
    async with (
        serve(registry, calls, settings) as server,
        httpx.AsyncClient(base_url=server.url) as client,
    ):
        await client.post(
            "/start", json={"agentType": "parent", "message": "go", "sessionId": "old"}
        )
        first = await read_stream(client, "old")
        assert first.chunks
        for _ in range(100):
            if not await server.runtime.store.read_chunks("old"):
                break
            await asyncio.sleep(0.05)
        replay = await read_stream(client, "old")
        status = (await client.get("/status/old")).json()
    assert replay.chunks == []
    assert replay.end == {"status": "completed"}
    assert (status["status"], status["lastSequence"]) == ("completed", len(first.chunks))


async def test_the_app_leaves_the_process_alone_and_the_server_command_settles_it(
    tmp_path: Path,
) -> None:
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)
    registry = AgentRegistry([adder(Calls())])
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path}/frozen.db")
    async with serve(registry, Calls(), settings):
        assert gc.get_threshold() == (700, 10, 10)
    app = create_app(registry, settings=settings, on_started=settle_collector)
    async with app.router.lifespan_context(app):
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (YOUNG_COLLECTION_THRESHOLD, 10, 10)
    gc.unfreeze()


async def test_a_quiet_stream_sends_a_heartbeat_each_period_it_is_quiet(tmp_path: Path) -> None:
    calls = Calls()
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path}/idle.db",
        stream_heartbeat=0.15,
        stream_poll=1.0,
    )
    # Each model call takes 0.5 s, so the stream is quiet for 0.5 s at a time.
    registry = AgentRegistry([delegator(calls, adder(calls, latency=0.5), latency=0.5)])
    async with (
        serve(registry, calls, settings) as server,
        httpx.AsyncClient(base_url=server.url, timeout=10) as client,
    ):
        await client.post("/start", json={**START, "sessionId": "idle"})
        stream = await client.get("/stream/idle")
    blocks = [block for block in stream.text.split("\r\n\r\n") if block]
    events = [block for block in blocks if block.startswith(("id:", "event:"))]
    # The end's id tells a browser's reconnection after it apart (it gets a 204).
    assert (
        events[-1] == f'id: {len(events) - 1}-end\r\nevent: end\r\ndata: {{"status": "completed"}}'
    )
    # Four quiet model calls of 0.5 s: about three heartbeats in each (more if the machine is
    # slow and the calls take longer), never a flood.
    assert 6 <= blocks.count(": ping") <= 20, blocks
