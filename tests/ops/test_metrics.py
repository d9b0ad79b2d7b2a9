"""Every metric moves: a tree served over HTTP and read by SSE, a takeover, a remote stream
that drops, and the scheduler's hook, each read back from `GET /metrics`."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
from httpx_sse import aconnect_sse
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel

from app import AgentRegistry, AgentRuntime, HttpRemoteAgentTransport, define_agent, define_tool
from app.agents import ToolContext
from app.models import FunctionModel, ModelRequest, ModelResponse, ScriptedModel, ToolCall
from app.models.base import Usage
from app.observability import metrics, scheduler_queue_length
from app.settings import Settings
from app.store import MemoryStore
from tests.api.conftest import read_stream, serve, tree_registry
from tests.databases import database_url
from tests.runtime.agents import Calls

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def scrape(client: httpx.AsyncClient) -> Samples:
    response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return parse(response.text)


def local() -> Samples:
    return parse(metrics.render()[0].decode())


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


class Word(BaseModel):
    word: str


@define_tool("shout", description="Upper-case a word.", input_schema=Word)
async def shout(input: Word, ctx: ToolContext[Any]) -> str:
    return input.word.upper()


def metered() -> AgentRegistry:
    """One agent: a tool call, then an answer; each model response reports its tokens."""
    model = ScriptedModel(
        [
            ModelResponse(tool_calls=[ToolCall("shout", {"word": "hey"})], usage=Usage(7, 1)),
            ModelResponse(text="HEY", usage=Usage(9, 2)),
        ],
        latency=0.05,
    )
    return AgentRegistry([define_agent("shouter", tools=[shout], model=model)])


async def test_a_tree_over_http_moves_the_run_model_tool_store_and_sse_metrics(
    tmp_path: Path,
) -> None:
    calls = Calls()
    registry = tree_registry(calls)
    for agent in metered():
        registry.register(agent)
    async with (
        database_url("sqlite", tmp_path) as url,
        serve(registry, calls, Settings(database_url=url)) as server,
        httpx.AsyncClient(base_url=server.url, timeout=10) as client,
    ):
        before = await scrape(client)
        for agent_type, session_id in (("parent", "p1"), ("shouter", "s1")):
            started = await client.post(
                "/start", json={"agentType": agent_type, "message": "go", "sessionId": session_id}
            )
            assert started.status_code == 201
        # While a stream is open, it is counted.
        async with aconnect_sse(client, "GET", "/stream/p1") as source:
            events = source.aiter_sse()
            first = await anext(events)
            during = await scrape(client)
            chunks = 1 if first.data else 0
            async for event in events:
                if event.event == "end":
                    break
                chunks += 1 if event.data else 0
        shouted = await read_stream(client, "s1")
        chunks += len(shouted.chunks)
        await until_scraped(client, lambda s: moved(before, s, "agent_sse_clients") == 0)
        after = await scrape(client)

    assert moved(before, during, "agent_sse_clients") == 1
    assert moved(before, after, "agent_sse_chunks_sent_total") == chunks
    for agent_type, runs in (("parent", 1), ("adder", 3), ("shouter", 1)):
        assert moved(before, after, "agent_runs_started_total", agent_type=agent_type) == runs
        assert (
            moved(
                before, after, "agent_runs_ended_total", agent_type=agent_type, status="completed"
            )
            == runs
        )
        assert (
            moved(before, after, "agent_run_duration_seconds_count", agent_type=agent_type) == runs
        )
        assert moved(before, during, "agent_sessions_active", agent_type=agent_type) in (0, runs)
        assert value(after, "agent_sessions_active", agent_type=agent_type) == 0
    assert moved(before, during, "agent_sessions_active", agent_type="parent") == 1
    for agent_type, model_calls in (("parent", 2), ("adder", 6), ("shouter", 2)):
        labels = {"agent_type": agent_type}
        assert (
            moved(before, after, "agent_model_calls_total", outcome="ok", **labels) == model_calls
        )
        assert (
            moved(before, after, "agent_model_call_duration_seconds_count", **labels) == model_calls
        )
    assert (
        moved(before, after, "agent_model_tokens_total", agent_type="shouter", kind="input") == 16
    )
    assert (
        moved(before, after, "agent_model_tokens_total", agent_type="shouter", kind="output") == 3
    )
    assert moved(before, after, "agent_tool_calls_total", tool="add", outcome="ok") == 3
    assert moved(before, after, "agent_tool_calls_total", tool="shout", outcome="ok") == 1
    assert moved(before, after, "agent_tool_call_duration_seconds_count", tool="add") == 3
    assert moved(before, after, "agent_delegations_total", agent_type="adder") == 3
    commits = moved(before, after, "agent_store_commit_duration_seconds_count")
    assert commits > 0
    assert moved(before, after, "agent_store_commit_group_size_count") == commits
    assert moved(before, after, "agent_store_commit_group_size_sum") >= commits


async def until_scraped(client: httpx.AsyncClient, condition: Any) -> None:
    for _ in range(200):
        if condition(await scrape(client)):
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the metrics never got there")


async def test_a_takeover_is_counted() -> None:
    release = asyncio.Event()

    async def slow(request: ModelRequest) -> ModelResponse:
        await release.wait()
        return ModelResponse(text="late")

    registry = AgentRegistry([define_agent("slow", model=FunctionModel(slow))])
    before = local()
    async with MemoryStore() as store:
        async with AgentRuntime(registry, store=store, owner_id="a", takeover_interval=None) as a:
            await a.execute("slow", "go", session_id="t1")
            await asyncio.sleep(0.01)
        # The process that ran it is gone: the next one under that name takes it over at once.
        release.set()
        async with AgentRuntime(registry, store=store, owner_id="a") as again:
            await until_async(lambda: again.status("t1"), "completed")
    after = local()
    assert moved(before, after, "agent_takeovers_total") == 1
    assert (
        moved(before, after, "agent_runs_ended_total", agent_type="slow", status="abandoned") == 1
    )
    assert (
        moved(before, after, "agent_runs_ended_total", agent_type="slow", status="completed") == 1
    )


async def until_async(read: Any, status: str) -> None:
    for _ in range(500):
        if (await read()).status == status:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never {status}")


async def test_a_remote_stream_that_drops_is_a_reconnect() -> None:
    served: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        after = request.headers["last-event-id"]
        served.append(after)
        chunk = {
            "type": "text_delta",
            "sequence": int(after) + 1,
            "agentId": "r",
            "agentType": "remote",
            "step": 1,
            "timestamp": 0,
            "delta": "x",
        }
        body = f"id: {int(after) + 1}\ndata: {json.dumps(chunk)}\n\n"
        if after == "1":
            body += 'event: end\ndata: {"status": "completed"}\n\n'
        return httpx.Response(200, text=body, headers={"content-type": "text/event-stream"})

    transport = HttpRemoteAgentTransport("http://remote.test", backoff=0.001, max_backoff=0.001)
    transport._client = httpx.AsyncClient(
        base_url="http://remote.test", transport=httpx.MockTransport(answer)
    )
    before = local()
    got = [chunk.sequence async for chunk in transport.stream("r")]
    await transport.aclose()
    assert (got, served) == ([1, 2], ["0", "1"])
    assert moved(before, local(), "agent_remote_reconnects_total") == 1


def test_the_scheduler_hook_sets_the_queue_length() -> None:
    scheduler_queue_length(4)
    assert value(local(), "agent_scheduler_queue_length") == 4
    scheduler_queue_length(0)
    assert value(local(), "agent_scheduler_queue_length") == 0


def test_labels_are_bound_once() -> None:
    assert metrics.for_tool("add") is metrics.for_tool("add")
    assert metrics.for_tool("add").calls("ok") is metrics.for_tool("add").calls("ok")
