"""Remote sub-agents between real servers on loopback, each with its own store."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from app import (
    AgentRegistry,
    HttpRemoteAgentTransport,
    create_remote_sub_agent_tool,
    define_agent,
    define_tool,
)
from app.agents import AgentConfig, ToolContext
from app.models import FunctionModel, ModelRequest, ModelResponse, ToolCall
from app.protocol import Chunk, ToolMessage
from app.settings import Settings
from tests.api.conftest import Server, free_port, read_stream, serve
from tests.databases import database_url
from tests.proxy import proxy_to
from tests.runtime.agents import Calls
from tests.support import check_invariants, until


class Query(BaseModel):
    query: str


class Findings(BaseModel):
    findings: list[str]


class Wrong(BaseModel):
    score: float


def researcher(
    calls: Calls, *, steps: int = 2, latency: float = 0.05, fail: bool = False
) -> AgentConfig:
    """A remote agent: `steps` tool calls, one per step, then its findings."""

    @define_tool("search", description="Search.", input_schema=Query)
    async def search(input: Query, ctx: ToolContext[Any]) -> str:
        calls[f"search {ctx.session_id} {ctx.tool_call_id}"] += 1
        return f"found {input.query}"

    def model(request: ModelRequest) -> Any:
        turn = sum(m.role == "assistant" for m in request.messages)
        calls[f"model {request.session_id} {turn}"] += 1

        async def answer() -> ModelResponse:
            await asyncio.sleep(latency)
            if fail:
                raise RuntimeError("the index is down")
            if turn < steps:
                return ModelResponse(tool_calls=[ToolCall("search", {"query": f"q{turn}"})])
            found = [m.result for m in request.messages if isinstance(m, ToolMessage)]
            return ModelResponse(tool_calls=[ToolCall("__finish__", {"findings": found})])

        return answer()

    return define_agent(
        "researcher", tools=[search], output_schema=Findings, model=FunctionModel(model)
    )


def orchestrator(
    transport: HttpRemoteAgentTransport,
    *,
    output_schema: type[BaseModel] = Findings,
    timeout: float | None = None,
    name: str = "orchestrator",
    output: type[BaseModel] | None = None,
) -> AgentConfig:
    tool = create_remote_sub_agent_tool(
        "researcher",
        description="Research on the research server.",
        input_schema=Query,
        output_schema=output_schema,
        transport=transport,
        remote_agent_type="researcher",
        timeout=timeout,
    )

    def model(request: ModelRequest) -> ModelResponse:
        done = [m for m in request.messages if isinstance(m, ToolMessage)]
        if not done:
            return ModelResponse(
                text="asking the researcher",
                tool_calls=[ToolCall(tool.name, {"query": "solar"}, id="r1")],
            )
        if output is not None:
            return ModelResponse(
                tool_calls=[ToolCall("__finish__", done[0].result or {"findings": []})]
            )
        return ModelResponse(text=f"result: {done[0].result} error: {done[0].error}")

    return define_agent(name, tools=[tool], model=FunctionModel(model), output_schema=output)


Pair = tuple[Server, Server, httpx.AsyncClient]


@contextlib.asynccontextmanager
async def pair(
    backend: str,
    tmp_path: Path,
    remote_agent: Callable[[Calls], AgentConfig],
    parent_agent: Callable[[HttpRemoteAgentTransport], AgentConfig],
) -> AsyncIterator[Pair]:
    """A research server and an orchestrating server that delegates to it."""
    remote_calls, parent_calls = Calls(), Calls()
    async with (
        database_url(backend, tmp_path / "remote") as remote_url,
        database_url(backend, tmp_path / "parent") as parent_url,
    ):
        settings = {"stream_heartbeat": 0.2, "stream_poll": 0.2}
        async with serve(
            AgentRegistry([remote_agent(remote_calls)]),
            remote_calls,
            Settings(database_url=remote_url, **settings),
        ) as remote:
            transport = HttpRemoteAgentTransport(remote.url, retry_for=1.0, backoff=0.05)
            async with (
                serve(
                    AgentRegistry([parent_agent(transport)]),
                    parent_calls,
                    Settings(database_url=parent_url, **settings),
                ) as parent,
                httpx.AsyncClient(base_url=parent.url, timeout=10) as client,
            ):
                yield remote, parent, client


async def finished(client: httpx.AsyncClient, session_id: str) -> dict[str, Any]:
    for _ in range(500):
        body = (await client.get(f"/status/{session_id}")).json()
        if body["status"] not in ("running",):
            return body  # type: ignore[no-any-return]
        await asyncio.sleep(0.02)
    raise AssertionError(f"{session_id} did not finish")


def remote_part(chunks: list[Chunk], agent_id: str) -> list[tuple[str, int]]:
    """The remote agent's chunks as (type, step), text deltas merged per step."""
    parts: list[tuple[str, int]] = []
    for chunk in chunks:
        if chunk.agent_id != agent_id:
            continue
        item = (chunk.type, chunk.step)
        if not (item[0] == "text_delta" and parts and parts[-1] == item):
            parts.append(item)
    return parts


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_delegation_to_a_remote_server_streams_as_one(backend: str, tmp_path: Path) -> None:
    async with pair(backend, tmp_path, researcher, orchestrator) as (remote, _parent, client):
        await client.post(
            "/start", json={"agentType": "orchestrator", "message": "go", "sessionId": "o"}
        )
        read = await read_stream(client, "o")
        status = await finished(client, "o")
        async with httpx.AsyncClient(base_url=remote.url) as remote_client:
            remote_read = await read_stream(remote_client, "o-remote-r1")
            remote_status = (await remote_client.get("/status/o-remote-r1")).json()

    check_invariants(read.chunks)
    assert status["output"] == ("result: {'findings': ['found q0', 'found q1']} error: None")
    child = [c for c in read.chunks if c.agent_id == "o-remote-r1"]
    assert [c.type for c in read.chunks if c.agent_id == "o"][:3] == [
        "text_delta",
        "tool_start",
        "subagent_start",
    ]
    assert remote_part(read.chunks, "o-remote-r1") == remote_part(remote_read.chunks, "o-remote-r1")
    assert {c.agent_type for c in child} == {"researcher"}
    (ref,) = status["subSessions"]
    assert (ref["subSessionId"], ref["status"], ref["remote"]) == (
        "o-remote-r1",
        "completed",
        {"streamId": "o-remote-r1", "lastSequence": len(remote_read.chunks)},
    )
    assert (remote_status["parentSessionId"], remote_status["status"]) == ("o", "completed")
    assert remote.calls == {
        "model o-remote-r1 0": 1,
        "model o-remote-r1 1": 1,
        "model o-remote-r1 2": 1,
        "search o-remote-r1 call-0-0": 1,
        "search o-remote-r1 call-1-0": 1,
    }


async def test_interrupting_the_parent_interrupts_the_remote_child_and_resume_reconciles(
    backend: str, tmp_path: Path
) -> None:
    def slow(calls: Calls) -> AgentConfig:
        return researcher(calls, steps=6, latency=0.1)

    async with pair(backend, tmp_path, slow, orchestrator) as (remote, _parent, client):
        await client.post(
            "/start", json={"agentType": "orchestrator", "message": "go", "sessionId": "o"}
        )
        await until(lambda: remote.calls["search o-remote-r1 call-1-0"] > 0)
        await client.post("/interrupt/o", json={"reason": "stop"})
        stopped = await finished(client, "o")
        async with httpx.AsyncClient(base_url=remote.url) as remote_client:
            remote_stopped = await finished(remote_client, "o-remote-r1")
            made = Calls(remote.calls)
            await client.post("/resume/o")
            done = await finished(client, "o")
            remote_done = (await remote_client.get("/status/o-remote-r1")).json()
            remote_read = await read_stream(remote_client, "o-remote-r1")
        read = await read_stream(client, "o")

    assert (stopped["status"], stopped["subSessions"][0]["status"]) == (
        "interrupted",
        "interrupted",
    )
    assert remote_stopped["status"] == "interrupted"
    assert (done["status"], remote_done["status"]) == ("completed", "completed")
    assert [c.sequence for c in read.chunks] == list(range(1, len(read.chunks) + 1))
    # Every remote chunk was copied exactly once, across the interrupt.
    assert remote_part(read.chunks, "o-remote-r1") == remote_part(remote_read.chunks, "o-remote-r1")
    # The remote run resumed from its checkpoint: only the call in flight at the interrupt ran
    # twice, and every call it had made before is among the final ones.
    assert sum(count - 1 for count in remote.calls.values()) <= 1
    assert set(made) <= set(remote.calls)
    assert done["subSessions"][0]["remote"]["lastSequence"] == len(remote_read.chunks)


@pytest.mark.parametrize(
    ("remote_agent", "parent_agent", "error"),
    [
        (
            lambda calls: researcher(calls, fail=True),
            orchestrator,
            "the index is down",
        ),
        (
            researcher,
            lambda transport: orchestrator(transport, output_schema=Wrong),
            "The remote output does not match the output schema: score: Field required",
        ),
        (
            lambda calls: researcher(calls, steps=50, latency=0.05),
            lambda transport: orchestrator(transport, timeout=0.4),
            "Remote sub-agent 'researcher' timed out after 0.4s",
        ),
    ],
)
async def test_remote_failures_become_tool_errors(
    tmp_path: Path, remote_agent: Any, parent_agent: Any, error: str
) -> None:
    async with pair("sqlite", tmp_path, remote_agent, parent_agent) as (remote, _parent, client):
        await client.post(
            "/start", json={"agentType": "orchestrator", "message": "go", "sessionId": "o"}
        )
        status = await finished(client, "o")
        async with httpx.AsyncClient(base_url=remote.url) as remote_client:
            remote_status = await finished(remote_client, "o-remote-r1")
    assert status["status"] == "completed"
    assert f"error: {error}" in status["output"]
    assert status["subSessions"][0]["status"] == "failed"
    assert remote_status["status"] in ("failed", "completed", "interrupted")


async def test_an_unreachable_remote_server_is_a_tool_error(tmp_path: Path) -> None:
    transport = HttpRemoteAgentTransport(
        f"http://127.0.0.1:{free_port()}", retry_for=0.2, backoff=0.01
    )
    calls = Calls()
    async with (
        database_url("sqlite", tmp_path) as url,
        serve(
            AgentRegistry([orchestrator(transport)]), calls, Settings(database_url=url)
        ) as parent,
        httpx.AsyncClient(base_url=parent.url) as client,
    ):
        await client.post(
            "/start", json={"agentType": "orchestrator", "message": "go", "sessionId": "o"}
        )
        status = await finished(client, "o")
    assert status["status"] == "completed"
    assert "POST /start at http://127.0.0.1:" in status["output"]
    assert "failed for 0.2s" in status["output"]


async def test_a_chain_of_three_servers(tmp_path: Path) -> None:
    calls = Calls()
    async with (
        database_url("sqlite", tmp_path / "c") as c_url,
        database_url("sqlite", tmp_path / "b") as b_url,
        database_url("sqlite", tmp_path / "a") as a_url,
        serve(AgentRegistry([researcher(calls)]), calls, Settings(database_url=c_url)) as c,
    ):
        middle = orchestrator(HttpRemoteAgentTransport(c.url), name="middle", output=Findings)
        async with serve(AgentRegistry([middle]), calls, Settings(database_url=b_url)) as b:
            top_tool = create_remote_sub_agent_tool(
                "middle",
                description="The middle server.",
                input_schema=Query,
                output_schema=Findings,
                transport=HttpRemoteAgentTransport(b.url),
                remote_agent_type="middle",
            )

            def top_model(request: ModelRequest) -> ModelResponse:
                done = [m for m in request.messages if isinstance(m, ToolMessage)]
                if not done:
                    return ModelResponse(
                        tool_calls=[ToolCall(top_tool.name, {"query": "x"}, id="m1")]
                    )
                return ModelResponse(text=f"top: {done[0].result}")

            top = define_agent("top", tools=[top_tool], model=FunctionModel(top_model))
            async with (
                serve(AgentRegistry([top]), calls, Settings(database_url=a_url)) as a,
                httpx.AsyncClient(base_url=a.url) as client,
            ):
                await client.post(
                    "/start", json={"agentType": "top", "message": "go", "sessionId": "t"}
                )
                read = await read_stream(client, "t")
                status = await finished(client, "t")

    assert status["output"] == "top: {'findings': ['found q0', 'found q1']}"
    check_invariants(read.chunks)
    agents = {c.agent_id for c in read.chunks}
    assert agents == {"t", "t-remote-m1", "t-remote-m1-remote-r1"}


async def test_the_parent_server_restarting_reuses_the_remote_result(tmp_path: Path) -> None:
    remote_calls, calls = Calls(), Calls()

    def slowish(c: Calls) -> AgentConfig:
        return researcher(c, steps=3, latency=0.15)

    async with (
        database_url("sqlite", tmp_path / "remote") as remote_url,
        database_url("sqlite", tmp_path / "parent") as parent_url,
        serve(
            AgentRegistry([slowish(remote_calls)]), remote_calls, Settings(database_url=remote_url)
        ) as remote,
    ):
        transport = HttpRemoteAgentTransport(remote.url, retry_for=1.0, backoff=0.05)
        registry = AgentRegistry([orchestrator(transport)])
        settings = Settings(database_url=parent_url, server_id="parent-1")
        async with (
            serve(registry, calls, settings) as first,
            httpx.AsyncClient(base_url=first.url) as client,
        ):
            await client.post(
                "/start", json={"agentType": "orchestrator", "message": "go", "sessionId": "o"}
            )
            await until(lambda: remote_calls["search o-remote-r1 call-0-0"] > 0)
        # The parent server is gone while the remote run goes on; it finishes meanwhile.
        async with httpx.AsyncClient(base_url=remote.url) as remote_client:
            await finished(remote_client, "o-remote-r1")
            remote_read = await read_stream(remote_client, "o-remote-r1")
        async with (
            serve(registry, calls, settings) as second,
            httpx.AsyncClient(base_url=second.url) as client,
        ):
            status = await finished(client, "o")
            read = await read_stream(client, "o")

    assert status["status"] == "completed"
    assert "found q2" in status["output"]
    # The remote agent ran exactly once; its chunks are in the parent's stream exactly once.
    assert all(count == 1 for count in remote_calls.values())
    assert remote_part(read.chunks, "o-remote-r1") == remote_part(remote_read.chunks, "o-remote-r1")
    assert [c.sequence for c in read.chunks] == list(range(1, len(read.chunks) + 1))


async def test_the_remote_server_restarting_mid_stream_is_reconnected(tmp_path: Path) -> None:
    """The remote server is down for seconds, not a moment: the parent keeps trying (its retry
    budget is minutes), reconnects after the last sequence it copied, and completes."""
    remote_calls, calls = Calls(), Calls()
    port = free_port()
    registry = AgentRegistry([researcher(remote_calls, steps=4, latency=0.15)])
    async with (
        database_url("sqlite", tmp_path / "remote") as remote_url,
        database_url("sqlite", tmp_path / "parent") as parent_url,
    ):
        remote_settings = Settings(database_url=remote_url, server_id="remote-1")
        transport = HttpRemoteAgentTransport(
            f"http://127.0.0.1:{port}", backoff=0.05, max_backoff=0.5
        )
        async with (
            serve(
                AgentRegistry([orchestrator(transport)]), calls, Settings(database_url=parent_url)
            ) as parent,
            httpx.AsyncClient(base_url=parent.url) as client,
        ):
            async with serve(registry, remote_calls, remote_settings, port=port):
                await client.post(
                    "/start", json={"agentType": "orchestrator", "message": "go", "sessionId": "o"}
                )
                await until(lambda: remote_calls["search o-remote-r1 call-1-0"] > 0)
            await asyncio.sleep(3.5)  # the remote server is down; the parent keeps trying
            async with serve(registry, remote_calls, remote_settings, port=port) as remote:
                status = await finished(client, "o")
                read = await read_stream(client, "o")
                async with httpx.AsyncClient(base_url=remote.url) as remote_client:
                    remote_read = await read_stream(remote_client, "o-remote-r1")

    assert status["status"] == "completed"
    assert "found q3" in status["output"]
    assert [c.sequence for c in read.chunks] == list(range(1, len(read.chunks) + 1))
    assert remote_part(read.chunks, "o-remote-r1") == remote_part(remote_read.chunks, "o-remote-r1")


async def test_a_half_open_connection_to_the_remote_server_is_noticed(tmp_path: Path) -> None:
    """The network between the servers goes silent mid-stream (the connection stays open,
    nothing arrives): the parent notices once the remote's heartbeats stop, reconnects, and
    completes without a chunk twice."""
    remote_calls, calls = Calls(), Calls()
    registry = AgentRegistry([researcher(remote_calls, steps=4, latency=0.15)])
    async with (
        database_url("sqlite", tmp_path / "remote") as remote_url,
        database_url("sqlite", tmp_path / "parent") as parent_url,
        serve(
            registry, remote_calls, Settings(database_url=remote_url, stream_heartbeat=0.2)
        ) as remote,
    ):
        port = int(remote.url.rsplit(":", 1)[1])
        async with proxy_to("127.0.0.1", port) as proxy:
            transport = HttpRemoteAgentTransport(f"http://127.0.0.1:{proxy.port}", backoff=0.05)
            async with (
                serve(
                    AgentRegistry([orchestrator(transport)]),
                    calls,
                    Settings(database_url=parent_url),
                ) as parent,
                httpx.AsyncClient(base_url=parent.url) as client,
            ):
                await client.post(
                    "/start", json={"agentType": "orchestrator", "message": "go", "sessionId": "o"}
                )
                await until(lambda: remote_calls["search o-remote-r1 call-1-0"] > 0)
                proxy.blackhole()
                await asyncio.sleep(0.5)
                proxy.heal()  # new connections pass again; the silent one stays silent
                status = {"status": "running"}
                async with asyncio.timeout(30):
                    while status["status"] == "running":
                        await asyncio.sleep(0.1)
                        status = (await client.get("/status/o")).json()
                read = await read_stream(client, "o")
            async with httpx.AsyncClient(base_url=remote.url) as remote_client:
                remote_read = await read_stream(remote_client, "o-remote-r1")

    assert status["status"] == "completed"
    assert "found q3" in status["output"]
    assert [c.sequence for c in read.chunks] == list(range(1, len(read.chunks) + 1))
    assert remote_part(read.chunks, "o-remote-r1") == remote_part(remote_read.chunks, "o-remote-r1")
