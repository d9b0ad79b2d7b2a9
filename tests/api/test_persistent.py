"""Persistent children over HTTP on every store: the companion tools `/agents` lists, a
blocking child that pauses the tree for the client, interrupting and resuming children that run
on their own, and terminating a child with children of its own."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from app import AgentRegistry, PersistentAgent, define_agent, define_tool
from app.agents import AgentConfig
from app.models import FunctionModel, ModelRequest, ModelResponse, ToolCall
from app.protocol import ToolMessage, UserMessage
from app.settings import Settings
from tests.api.conftest import read_stream, serve
from tests.databases import database_url
from tests.runtime.agents import Calls
from tests.runtime.persistent_agents import (
    Findings,
    answers,
    coordinator,
    named,
    researcher,
    spawn,
)
from tests.support import check_invariants, check_tool_calls


@contextlib.asynccontextmanager
async def serving(
    backend: str, tmp_path: Path, *agents: AgentConfig
) -> AsyncIterator[httpx.AsyncClient]:
    async with database_url(backend, tmp_path) as url:
        settings = Settings(database_url=url, stream_heartbeat=0.2, stream_poll=0.2)
        async with (
            serve(AgentRegistry(list(agents)), Calls(), settings) as server,
            httpx.AsyncClient(base_url=server.url, timeout=10) as client,
        ):
            yield client


async def start(client: httpx.AsyncClient, agent_type: str, session_id: str = "p") -> None:
    answer = await client.post(
        "/start", json={"agentType": agent_type, "message": "go", "sessionId": session_id}
    )
    assert answer.status_code == 201, answer.text


async def status(client: httpx.AsyncClient, session_id: str) -> dict[str, Any]:
    answer = await client.get(f"/status/{session_id}")
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def until(client: httpx.AsyncClient, session_id: str, wanted: str) -> dict[str, Any]:
    for _ in range(500):
        body = await status(client, session_id)
        if body["status"] == wanted:
            return body
        await asyncio.sleep(0.02)
    raise AssertionError(f"{session_id} never became {wanted}: {body}")


async def test_agents_lists_the_companion_tools_with_their_agent_types(
    backend: str, tmp_path: Path
) -> None:
    calls = Calls()
    child = researcher(calls)
    blocking = coordinator(calls, child, [])
    quiet = coordinator(calls, child, [], mode="non-blocking", name="quiet")
    async with serving(backend, tmp_path, blocking, quiet) as client:
        listed = {a["name"]: a for a in (await client.get("/agents")).json()}
    assert set(listed["coordinator"]["tools"]) == {
        "companion__spawnAgent",
        "companion__sendMessage",
        "companion__listChildren",
        "companion__getChildStatus",
        "companion__waitForResult",
        "companion__terminateChild",
    }
    assert listed["researcher"]["outputSchema"]["required"] == ["findings"]
    # Waiting is for blocking children only.
    assert "companion__waitForResult" not in listed["quiet"]["tools"]


def asker(calls: Calls) -> AgentConfig:
    """A persistent child that asks the client before it answers (a client tool)."""
    ask = define_tool("ask_user", description="Ask the user.", input_schema=Findings)

    def model(request: ModelRequest) -> ModelResponse:
        turn = sum(m.role == "assistant" for m in request.messages)
        calls[f"model {request.session_id} {turn}"] += 1
        answered = [m for m in request.messages if isinstance(m, ToolMessage)]
        if not answered:
            return ModelResponse(tool_calls=[ToolCall("ask_user", {"findings": "ok?"}, id="q")])
        told = [m.content for m in request.messages if isinstance(m, UserMessage)]
        found = f"{told[-1]}: {answered[-1].result}"
        return ModelResponse(tool_calls=[ToolCall("__finish__", {"findings": found})])

    return define_agent(
        "researcher",
        description="Researches, asking first.",
        tools=[ask],
        output_schema=Findings,
        model=FunctionModel(model, latency=0.01),
    )


async def test_a_blocking_child_that_asks_the_client_pauses_the_tree(
    backend: str, tmp_path: Path
) -> None:
    calls = Calls()
    parent = coordinator(calls, asker(calls), [[spawn("a", "solar", name="sun")]])
    async with serving(backend, tmp_path, parent) as client:
        await start(client, "coordinator")
        first = await read_stream(client, "p")
        assert first.end == {"status": "paused_awaiting_client"}
        paused = await status(client, "p")
        assert paused["pendingCalls"] == [
            {
                "sessionId": "p-agent-sun",
                "toolCallId": "q",
                "toolName": "ask_user",
                "arguments": {"findings": "ok?"},
                "reason": "client",
            }
        ]
        answer = {"toolResults": [{"sessionId": "p-agent-sun", "toolCallId": "q", "result": "yes"}]}
        resumed = await client.post("/resume/p", json=answer)
        assert resumed.status_code == 200, resumed.text
        rest = await read_stream(client, "p", params={"fromSequence": len(first.chunks)})
        done = await status(client, "p")
    assert rest.end == {"status": "completed"}
    assert answers(done["output"])["a"] == {"findings": "solar: yes"}
    whole = first.chunks + rest.chunks
    check_invariants(whole)
    check_tool_calls(whole, "completed")
    assert set(calls.values()) == {1}  # the child resumed from its checkpoint


async def test_an_interrupt_reaches_children_running_on_their_own_and_resume_restarts_them(
    backend: str, tmp_path: Path
) -> None:
    calls = Calls()
    steps = [[spawn("a", "slow one"), spawn("b", "slow two")]]
    parent = coordinator(calls, researcher(calls, slow_on="slow"), steps, mode="non-blocking")
    async with serving(backend, tmp_path, parent) as client:
        await start(client, "coordinator")
        await until(client, "p", "completed")  # its turn ended; its children run
        stopped = await client.post("/interrupt/p", json={"reason": "enough"})
        assert stopped.status_code == 202, stopped.text
        first = await read_stream(client, "p")
        assert first.end == {"status": "interrupted"}
        for child in ("p-agent-researcher-1", "p-agent-researcher-2"):
            body = await status(client, child)
            assert (body["status"], body["error"]) == ("interrupted", "enough")
        again = await client.post("/resume/p", json={})
        assert again.status_code == 200, again.text
        rest = await read_stream(client, "p", params={"fromSequence": len(first.chunks)})
        assert rest.end == {"status": "completed"}
        outputs = [
            (await status(client, child))["output"]
            for child in ("p-agent-researcher-1", "p-agent-researcher-2")
        ]
        told = await client.post("/resume/p", json={"message": "and?"})
        assert told.status_code == 200, told.text
        report = await until(client, "p", "completed")
    assert outputs == [{"findings": "slow one"}, {"findings": "slow two"}]
    assert len(answers(report["output"])["notice"]) == 2
    check_invariants(first.chunks + rest.chunks)
    check_tool_calls(first.chunks + rest.chunks, "completed")


def scripted(calls: Calls, steps: list[list[ToolCall]], last: ModelResponse) -> FunctionModel:
    """Makes `steps` one model call each, then answers `last`."""

    def model(request: ModelRequest) -> ModelResponse:
        turn = sum(m.role == "assistant" for m in request.messages)
        calls[f"model {request.session_id} {turn}"] += 1
        return ModelResponse(tool_calls=steps[turn]) if turn < len(steps) else last

    return FunctionModel(model, latency=0.01)


async def test_terminating_a_child_ends_its_own_children_too(backend: str, tmp_path: Path) -> None:
    """`top` spawns `mid`, which spawns a slow researcher and finishes while it runs; `top`
    then terminates `mid`: the researcher stops too, and the tree ends."""
    calls = Calls()
    leaf = researcher(calls, slow_on="slow")
    mid = define_agent(
        "mid",
        description="Hands work on.",
        persistent_agents=[PersistentAgent(leaf, mode="non-blocking")],
        output_schema=Findings,
        model=scripted(
            calls,
            [[spawn("r", "slow leaf")]],
            ModelResponse(tool_calls=[ToolCall("__finish__", {"findings": "handed on"})]),
        ),
    )
    hand = ToolCall("companion__spawnAgent", {"agent": "mid", "initialMessage": "w", "name": "m"})
    top = define_agent(
        "top",
        persistent_agents=[PersistentAgent(mid, mode="blocking")],
        model=scripted(calls, [[hand], [named("terminate", "t", "m")]], ModelResponse(text="ok")),
    )
    async with serving(backend, tmp_path, top) as client:
        await start(client, "top")
        read = await read_stream(client, "p")
        tree = (await client.get("/status/p", params={"tree": "true"})).json()
        below = (await client.get("/status/p-agent-m", params={"tree": "true"})).json()
    assert read.end == {"status": "completed"}
    # A child's own tree says how its parent holds it.
    top = below["tree"]
    assert (top["mode"], top["name"], top["parentToolCallId"]) == ("persistent", "m", "call-0-0")
    statuses = {node["sessionId"]: node["status"] for node in _nodes(tree["tree"])}
    assert statuses == {
        "p": "completed",
        "p-agent-m": "terminated",
        "p-agent-m-agent-researcher-1": "terminated",
    }
    # The researcher was stopped in its first (slow) model call.
    assert calls["model p-agent-m-agent-researcher-1 1"] == 0
    check_invariants(read.chunks)


def _nodes(view: dict[str, Any]) -> list[dict[str, Any]]:
    found = [view]
    for child in view["children"]:
        found += _nodes(child)
    return found


async def test_a_blocking_child_in_flight_when_its_parent_pauses_resumes_with_its_memory(
    backend: str, tmp_path: Path
) -> None:
    """The coordinator spawns a slow blocking child and asks the client in the same step: it
    pauses, the child is dropped (`parent_suspended`), and on resume the child runs again
    from its checkpoint under the same name, its first message kept."""
    calls = Calls()
    ask = define_tool("ask_user", description="Ask the user.", input_schema=Findings)
    step = [spawn("a", "slow topic", name="x"), ToolCall("ask_user", {"findings": "go?"}, id="q")]
    parent = define_agent(
        "coordinator",
        tools=[ask],
        persistent_agents=[PersistentAgent(researcher(calls, slow_on="slow"), mode="blocking")],
        model=scripted(calls, [step, [named("list", "l")]], ModelResponse(text="done")),
    )
    async with serving(backend, tmp_path, parent) as client:
        await start(client, "coordinator")
        first = await read_stream(client, "p")
        assert first.end == {"status": "paused_awaiting_client"}
        dropped = await status(client, "p-agent-x")
        answer = {"toolResults": [{"toolCallId": "q", "result": "yes"}]}
        assert (await client.post("/resume/p", json=answer)).status_code == 200
        rest = await read_stream(client, "p", params={"fromSequence": len(first.chunks)})
        child = await status(client, "p-agent-x")
        parent_status = await status(client, "p")
    assert (dropped["status"], dropped["failureReason"]) == ("failed", "parent_suspended")
    assert rest.end == {"status": "completed"}
    assert (child["status"], child["output"]) == ("completed", {"findings": "slow topic"})
    (ref,) = parent_status["subSessions"]
    assert (ref["name"], ref["mode"], ref["status"]) == ("x", "persistent", "completed")
    whole = first.chunks + rest.chunks
    check_invariants(whole)
    check_tool_calls(whole, "completed")
    # The child's model call, if the pause cut it short, was made again; no other call was.
    assert calls["model p-agent-x 0"] in (1, 2)
    assert calls["model p 0"] == calls["model p 1"] == calls["model p 2"] == 1


async def test_a_child_on_its_own_that_asks_the_client_is_answered_through_the_root(
    backend: str, tmp_path: Path
) -> None:
    """The coordinator's turn is over when its non-blocking child asks the client: the stream
    ends paused, the root's `/status` lists the call, and the root's `/resume` answers it."""
    calls = Calls()
    steps = [[spawn("a", "solar", name="sun")]]
    parent = coordinator(calls, asker(calls), steps, mode="non-blocking")
    async with serving(backend, tmp_path, parent) as client:
        await start(client, "coordinator")
        first = await read_stream(client, "p")
        assert first.end == {"status": "paused_awaiting_client"}
        paused = await status(client, "p")
        assert paused["status"] == "completed"
        assert [(c["sessionId"], c["toolCallId"]) for c in paused["pendingCalls"]] == [
            ("p-agent-sun", "q")
        ]
        answer = {"toolResults": [{"sessionId": "p-agent-sun", "toolCallId": "q", "result": "yes"}]}
        resumed = await client.post("/resume/p", json=answer)
        assert resumed.status_code == 200, resumed.text
        assert resumed.json()["sessionId"] == "p-agent-sun"
        rest = await read_stream(client, "p", params={"fromSequence": len(first.chunks)})
        assert rest.end == {"status": "completed"}
        assert (await status(client, "p"))["pendingCalls"] == []
        told = await client.post("/resume/p", json={"message": "and?"})
        assert told.status_code == 200, told.text
        report = await until(client, "p", "completed")
    (notice,) = answers(report["output"])["notice"]
    assert '"solar: yes"' in notice
    whole = first.chunks + rest.chunks
    check_invariants(whole)
    check_tool_calls(whole, "completed")
    assert set(calls.values()) == {1}
