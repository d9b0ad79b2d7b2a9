"""Suspension across the whole tree, over HTTP on every store: a client tool or an approval
anywhere in the tree pauses the tree, `/status` lists what it waits for, and `/resume` answers
it, wherever the call is."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest
from httpx_sse import aconnect_sse
from pydantic import BaseModel

from app import (
    AgentRegistry,
    HttpRemoteAgentTransport,
    create_remote_sub_agent_tool,
    create_sub_agent_tool,
    define_agent,
    define_tool,
)
from app.agents import AgentConfig, ToolContext
from app.models import FunctionModel, ModelRequest, ModelResponse, ToolCall
from app.protocol import Chunk, ToolMessage, ToolPendingChunk
from app.runtime.children import DROPPED
from app.runtime.inputs import REJECTED
from app.settings import Settings
from tests.api.conftest import Server, read_stream, serve
from tests.databases import database_url
from tests.runtime.agents import Calls
from tests.support import check_invariants, check_tool_calls

Kind = Literal["client", "approval"]


class Question(BaseModel):
    question: str


class Amount(BaseModel):
    amount: int


class Task(BaseModel):
    task: str


class Said(BaseModel):
    text: str


def said(name: str, text: str) -> ModelResponse:
    """The last answer: plain text from the root, an output from a child."""
    if name == "root":
        return ModelResponse(text=text)
    return ModelResponse(tool_calls=[ToolCall("__finish__", {"text": text})])


def told(result: Any) -> Any:
    """What a child said, from its parent's tool result."""
    return result["text"] if isinstance(result, dict) and "text" in result else result


def results(request: ModelRequest) -> dict[str, Any]:
    """The tool results the conversation holds, by call id (errors as `error: ...`)."""
    return {
        m.tool_call_id: m.result if m.error is None else f"error: {m.error}"
        for m in request.messages
        if isinstance(m, ToolMessage)
    }


def counted(calls: Calls, request: ModelRequest) -> dict[str, Any]:
    """Count the model call by session and turn (a committed one never comes again)."""
    turn = sum(m.role == "assistant" for m in request.messages)
    calls[f"model {request.session_id} {turn}"] += 1
    return results(request)


def leaf(calls: Calls, kind: Kind, name: str = "leaf") -> AgentConfig:
    """Asks the user a question (a client tool) or buys something (a tool needing approval)."""
    ask = define_tool("ask_user", description="Ask the user.", input_schema=Question)

    @define_tool("buy", description="Buy.", input_schema=Amount, requires_approval=True)
    async def buy(input: Amount, ctx: ToolContext[Any]) -> str:
        calls[f"buy {ctx.session_id}"] += 1
        return f"bought {input.amount}"

    def model(request: ModelRequest) -> ModelResponse:
        seen = counted(calls, request)
        if not seen:
            if kind == "client":
                return ModelResponse(tool_calls=[ToolCall("ask_user", {"question": "Go?"}, id="x")])
            return ModelResponse(tool_calls=[ToolCall("buy", {"amount": 3}, id="x")])
        return said(name, f"{name} got {seen['x']}")

    return define_agent(
        name, tools=[ask, buy], output_schema=Said, model=FunctionModel(model, latency=0.02)
    )


def delegating(calls: Calls, name: str, child: AgentConfig, *extra: Any) -> AgentConfig:
    """Hands its task to `child` (call `c`), with `extra` calls of its own in the same step."""

    def model(request: ModelRequest) -> ModelResponse:
        seen = counted(calls, request)
        if not seen:
            return ModelResponse(
                tool_calls=[ToolCall(f"subagent__{child.name}", {"task": "t"}, id="c"), *extra]
            )
        return said(name, f"{name} got [{told(seen['c'])}]")

    return define_agent(
        name,
        tools=[create_sub_agent_tool(child, Task), *_tools(calls)],
        output_schema=None if name == "root" else Said,
        model=FunctionModel(model, latency=0.02),
    )


def _tools(calls: Calls) -> list[Any]:
    class Nap(BaseModel):
        seconds: float

    @define_tool("nap", description="Sleep a while.", input_schema=Nap)
    async def nap(input: Nap, ctx: ToolContext[Any]) -> str:
        calls[f"nap {ctx.session_id}"] += 1
        await asyncio.sleep(input.seconds)
        return "rested"

    return [nap]


def tree(calls: Calls, kind: Kind, depth: int) -> AgentConfig:
    """root -> leaf (depth 1) or root -> mid -> leaf (depth 2)."""
    child = leaf(calls, kind)
    if depth == 2:
        child = delegating(calls, "mid", child)
    return delegating(calls, "root", child)


@contextlib.asynccontextmanager
async def serving(
    backend: str, tmp_path: Path, root: AgentConfig, calls: Calls
) -> AsyncIterator[tuple[Server, httpx.AsyncClient]]:
    async with database_url(backend, tmp_path) as url:
        settings = Settings(database_url=url, stream_heartbeat=0.2, stream_poll=0.2)
        async with (
            serve(AgentRegistry([root]), calls, settings) as server,
            httpx.AsyncClient(base_url=server.url, timeout=10) as client,
        ):
            yield server, client


async def started(client: httpx.AsyncClient, session_id: str) -> list[Chunk]:
    """Start the root and read its stream to the pause."""
    answer = await client.post(
        "/start", json={"agentType": "root", "message": "go", "sessionId": session_id}
    )
    assert answer.status_code == 201, answer.text
    read = await read_stream(client, session_id)
    assert read.end == {"status": "paused_awaiting_client"}
    return read.chunks


async def resumed(
    client: httpx.AsyncClient, session_id: str, body: dict[str, Any], after: int
) -> tuple[list[Chunk], dict[str, Any]]:
    """Resume the root and read the rest of its stream; its status at the end."""
    answer = await client.post(f"/resume/{session_id}", json=body)
    assert answer.status_code == 200, answer.text
    read = await read_stream(client, session_id, params={"fromSequence": after})
    status = (await client.get(f"/status/{session_id}")).json()
    assert read.end == {"status": status["status"]}
    return read.chunks, status


LEAF = {1: "r-sub-c", 2: "r-sub-c-sub-c"}
"""The leaf's session id at each depth."""


@pytest.mark.parametrize("depth", [1, 2])
@pytest.mark.parametrize("kind", ["client", "approval"])
async def test_a_call_deep_in_the_tree_pauses_the_tree_and_its_answer_resumes_it(
    backend: str, tmp_path: Path, depth: int, kind: Kind
) -> None:
    calls = Calls()
    async with serving(backend, tmp_path, tree(calls, kind, depth), calls) as (_, client):
        first = await started(client, "r")
        leaf_id = LEAF[depth]
        (pending,) = [c for c in first if isinstance(c, ToolPendingChunk)]
        assert (pending.agent_id, pending.tool_call_id, pending.reason) == (leaf_id, "x", kind)
        status = (await client.get("/status/r")).json()
        assert status["status"] == "paused_awaiting_client"
        assert status["pendingCalls"] == [
            {
                "sessionId": leaf_id,
                "toolCallId": "x",
                "toolName": "ask_user" if kind == "client" else "buy",
                "arguments": {"question": "Go?"} if kind == "client" else {"amount": 3},
                "reason": kind,
            }
        ]
        for paused in ("r", "r-sub-c", leaf_id):
            body = (await client.get(f"/status/{paused}")).json()
            assert body["status"] == "paused_awaiting_client"
        answer = (
            {"toolResults": [{"sessionId": leaf_id, "toolCallId": "x", "result": "yes"}]}
            if kind == "client"
            else {"approvals": [{"sessionId": leaf_id, "toolCallId": "x", "approved": True}]}
        )
        rest, status = await resumed(client, "r", answer, len(first))

    got = "yes" if kind == "client" else "bought 3"
    inner = f"leaf got {got}" if depth == 1 else f"mid got [leaf got {got}]"
    assert (status["status"], status["output"]) == ("completed", f"root got [{inner}]")
    assert status["pendingCalls"] == []
    whole = first + rest
    check_invariants(whole)
    check_tool_calls(first, "paused_awaiting_client")
    check_tool_calls(whole, "completed")
    # Every model call was made once: the paused sessions resumed from their checkpoints.
    assert set(calls.values()) == {1}
    assert calls[f"buy {leaf_id}"] == (1 if kind == "approval" else 0)


async def test_a_refused_approval_reaches_the_leaf_as_a_tool_error(
    backend: str, tmp_path: Path
) -> None:
    calls = Calls()
    async with serving(backend, tmp_path, tree(calls, "approval", 2), calls) as (_, client):
        first = await started(client, "r")
        body = {"approvals": [{"sessionId": "r-sub-c-sub-c", "toolCallId": "x", "approved": False}]}
        rest, status = await resumed(client, "r", body, len(first))
    assert status["output"] == f"root got [mid got [leaf got error: {REJECTED}]]"
    assert calls["buy r-sub-c-sub-c"] == 0
    ends = [c for c in rest if c.type == "tool_end" and c.agent_id == "r-sub-c-sub-c"]
    assert [(c.tool_call_id, c.error) for c in ends] == [("x", REJECTED)]  # type: ignore[attr-defined]
    check_tool_calls(first + rest, "completed")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "toolResults: a client tool's result is missing for x (session r-sub-c-sub-c)"),
        (
            {"toolResults": [{"toolCallId": "x", "result": 1}]},
            "toolResults: no call awaiting a client tool's result has the id x (session r)",
        ),
        (
            {"toolResults": [{"sessionId": "nobody", "toolCallId": "x", "result": 1}]},
            "has the id x (session nobody)",
        ),
        (
            {"toolResults": [{"sessionId": "r-sub-c-sub-c", "toolCallId": "y", "result": 1}]},
            "has the id y (session r-sub-c-sub-c)",
        ),
        (
            {"approvals": [{"sessionId": "r-sub-c-sub-c", "toolCallId": "x", "approved": True}]},
            "approvals: no call awaiting an approval has the id x",
        ),
        (
            {
                "toolResults": [
                    {"sessionId": "r-sub-c-sub-c", "toolCallId": "x", "result": 1},
                    {"sessionId": "r-sub-c-sub-c", "toolCallId": "x", "result": 2},
                ]
            },
            "toolResults answers x more than once",
        ),
        ({"message": "hello"}, "waits for tool results or approvals, not a message"),
    ],
)
async def test_answers_that_do_not_fit_the_tree_are_422_and_change_nothing(
    backend: str, tmp_path: Path, body: dict[str, Any], message: str
) -> None:
    calls = Calls()
    async with serving(backend, tmp_path, tree(calls, "client", 2), calls) as (_, client):
        first = await started(client, "r")
        before = {
            session: (await client.get(f"/sessions/{session}/messages")).json()
            for session in ("r", "r-sub-c", "r-sub-c-sub-c")
        }
        status = (await client.get("/status/r")).json()
        answer = await client.post("/resume/r", json=body)
        assert answer.status_code == 422, answer.text
        assert message in answer.json()["error"]["message"]
        for session, messages in before.items():
            assert (await client.get(f"/sessions/{session}/messages")).json() == messages
        assert (await client.get("/status/r")).json() == status
        # The same tree still resumes with the right answers.
        good = {"toolResults": [{"sessionId": "r-sub-c-sub-c", "toolCallId": "x", "result": 7}]}
        _, done = await resumed(client, "r", good, len(first))
    assert done["output"] == "root got [mid got [leaf got 7]]"


async def test_a_sibling_dropped_by_the_pause_runs_again_and_a_finished_one_does_not(
    backend: str, tmp_path: Path
) -> None:
    """The root starts the pausing mid, a slow sibling (dropped when the tree pauses) and a
    quick tool (finished by then): on resume only the dropped sibling runs again."""
    calls = Calls()

    def slowly(request: ModelRequest) -> ModelResponse:
        counted(calls, request)
        return said("slow", "slow done")

    slow = define_agent("slow", output_schema=Said, model=FunctionModel(slowly, latency=1.0))
    mid = delegating(calls, "mid", leaf(calls, "client"))
    root_tools = [create_sub_agent_tool(mid, Task), create_sub_agent_tool(slow, Task)]

    def model(request: ModelRequest) -> ModelResponse:
        seen = counted(calls, request)
        if not seen:
            return ModelResponse(
                tool_calls=[
                    ToolCall("subagent__mid", {"task": "t"}, id="c"),
                    ToolCall("subagent__slow", {"task": "t"}, id="s"),
                    ToolCall("nap", {"seconds": 0.2}, id="n"),
                ]
            )
        return ModelResponse(text=f"c={told(seen['c'])} s={told(seen['s'])} n={seen['n']}")

    root = define_agent(
        "root", tools=[*root_tools, *_tools(calls)], model=FunctionModel(model, latency=0.02)
    )
    async with serving(backend, tmp_path, root, calls) as (_, client):
        first = await started(client, "r")
        dropped = (await client.get("/status/r-sub-s")).json()
        assert (dropped["status"], dropped["failureReason"]) == ("failed", "parent_suspended")
        ends = {c.tool_call_id: c.error for c in first if c.type == "tool_end"}  # type: ignore[attr-defined]
        assert ends == {"n": None, "s": DROPPED}
        body = {"toolResults": [{"sessionId": "r-sub-c-sub-c", "toolCallId": "x", "result": 1}]}
        rest, status = await resumed(client, "r", body, len(first))
    assert status["output"] == "c=mid got [leaf got 1] s=slow done n=rested"
    assert calls["nap r"] == 1
    assert calls["model r-sub-s 0"] == 2  # dropped mid-call, then run from scratch
    assert {k: v for k, v in calls.items() if k.startswith("model") and "r-sub-s" not in k} == {
        k: 1 for k in calls if k.startswith("model") and "r-sub-s" not in k
    }
    whole = first + rest
    check_invariants(whole)
    check_tool_calls(whole, "completed")


# -- remote children -----------------------------------------------------------------------------


def digger(calls: Calls, slow: float) -> AgentConfig:
    """A remote agent: a quick search, then a slow last step."""

    @define_tool("search", description="Search.", input_schema=Task)
    async def search(input: Task, ctx: ToolContext[Any]) -> str:
        calls[f"search {ctx.session_id}"] += 1
        return "found"

    def model(request: ModelRequest) -> Any:
        seen = counted(calls, request)

        async def answer() -> ModelResponse:
            if not seen:
                return ModelResponse(tool_calls=[ToolCall("search", {"task": "t"}, id="k")])
            await asyncio.sleep(slow)
            return said("digger", f"dug {seen['k']}")

        return answer()

    return define_agent("digger", tools=[search], output_schema=Said, model=FunctionModel(model))


def remote_root(transport: HttpRemoteAgentTransport, calls: Calls, remote_type: str) -> AgentConfig:
    """Calls the remote agent (call `c`); with the slow digger, also asks the user (call `q`)
    and naps, in the same step."""
    tool = create_remote_sub_agent_tool(
        remote_type,
        description="The other server's agent.",
        input_schema=Task,
        output_schema=Said,
        transport=transport,
        remote_agent_type=remote_type,
    )
    ask = define_tool("ask_user", description="Ask the user.", input_schema=Question)

    def model(request: ModelRequest) -> ModelResponse:
        seen = counted(calls, request)
        if not seen:
            asks = [
                ToolCall("ask_user", {"question": "Go?"}, id="q"),
                ToolCall("nap", {"seconds": 0.3}, id="n"),
            ]
            return ModelResponse(
                tool_calls=[
                    ToolCall(tool.name, {"task": "t"}, id="c"),
                    *(asks if remote_type == "digger" else ()),
                ]
            )
        return ModelResponse(text=f"root got [{told(seen['c'])}] q={seen.get('q')}")

    return define_agent("root", tools=[tool, ask, *_tools(calls)], model=FunctionModel(model))


@contextlib.asynccontextmanager
async def two_servers(
    backend: str, tmp_path: Path, remote_agent: AgentConfig, remote_type: str, calls: Calls
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    """The remote agent's server, and the root's server that delegates to it."""
    async with (
        database_url(backend, tmp_path / "remote") as remote_url,
        database_url(backend, tmp_path / "parent") as parent_url,
    ):
        quick = {"stream_heartbeat": 0.2, "stream_poll": 0.2}
        async with serve(
            AgentRegistry([remote_agent]), calls, Settings(database_url=remote_url, **quick)
        ) as remote:
            transport = HttpRemoteAgentTransport(remote.url, retry_for=1.0, backoff=0.05)
            root = remote_root(transport, calls, remote_type)
            async with (
                serve(
                    AgentRegistry([root]), calls, Settings(database_url=parent_url, **quick)
                ) as parent,
                httpx.AsyncClient(base_url=parent.url, timeout=10) as client,
                httpx.AsyncClient(base_url=remote.url, timeout=10) as remote_client,
            ):
                yield client, remote_client


def copied(chunks: list[Chunk], agent_id: str) -> list[tuple[str, int, str]]:
    """A remote session's chunks, as the parent copied them (type, step, tool call)."""
    return [
        (c.type, c.step, getattr(c, "tool_call_id", ""))
        for c in chunks
        if c.agent_id == agent_id and c.type != "text_delta"
    ]


async def test_a_remote_child_that_pauses_pauses_the_tree_and_gets_its_answer(
    backend: str, tmp_path: Path
) -> None:
    calls = Calls()
    asker = leaf(calls, "client", name="asker")
    async with two_servers(backend, tmp_path, asker, "asker", calls) as (client, remote):
        first = await started(client, "r")
        status = (await client.get("/status/r")).json()
        assert status["pendingCalls"] == [
            {
                "sessionId": "r-remote-c",
                "toolCallId": "x",
                "toolName": "ask_user",
                "arguments": {"question": "Go?"},
                "reason": "client",
            }
        ]
        (ref,) = status["subSessions"]
        assert ref["status"] == "paused_awaiting_client"
        body = {"toolResults": [{"sessionId": "r-remote-c", "toolCallId": "x", "result": "sure"}]}
        rest, status = await resumed(client, "r", body, len(first))
        own = await read_stream(remote, "r-remote-c")

    assert status["output"] == "root got [asker got sure] q=None"
    whole = first + rest
    check_invariants(whole)
    check_tool_calls(whole, "completed")
    # Each chunk of the remote session reached the root's stream once, in its order.
    assert copied(whole, "r-remote-c") == copied(own.chunks, "r-remote-c")
    assert set(calls.values()) == {1}


async def test_a_slow_remote_child_does_not_hold_up_the_pause_and_resumes_on_resume(
    backend: str, tmp_path: Path
) -> None:
    """The root's own tools take 0.3 s; its remote child's last step takes 4 s: the tree
    pauses at once, the remote session is interrupted, and it resumes (same id, its committed
    step not made again) when the tree does."""
    calls = Calls()
    async with two_servers(backend, tmp_path, digger(calls, 4.0), "digger", calls) as (
        client,
        remote,
    ):
        began = asyncio.get_running_loop().time()
        first = await started(client, "r")
        assert asyncio.get_running_loop().time() - began < 1.5
        ends = {
            c.tool_call_id: c.error  # type: ignore[attr-defined]
            for c in first
            if c.type == "tool_end" and c.agent_id == "r"
        }
        assert ends == {"n": None, "c": DROPPED}
        assert [p.tool_call_id for p in first if isinstance(p, ToolPendingChunk)] == ["q"]
        for _ in range(100):
            if (await remote.get("/status/r-remote-c")).json()["status"] == "interrupted":
                break
            await asyncio.sleep(0.05)
        assert (await remote.get("/status/r-remote-c")).json()["status"] == "interrupted"
        body = {"toolResults": [{"toolCallId": "q", "result": "yes"}]}
        rest, status = await resumed(client, "r", body, len(first))

    assert status["output"] == "root got [dug found] q=yes"
    assert calls["search r-remote-c"] == 1
    assert calls["model r-remote-c 0"] == 1
    assert calls["model r-remote-c 1"] == 2  # cut short by the pause, made again on resume
    whole = first + rest
    check_invariants(whole)
    check_tool_calls(whole, "completed")


async def ag_ui_run(client: httpx.AsyncClient, body: dict[str, Any]) -> list[dict[str, Any]]:
    """POST an AG-UI run and read its events to the end."""
    events: list[dict[str, Any]] = []
    async with aconnect_sse(client, "POST", "/ag-ui/root", json=body) as source:
        source.response.raise_for_status()
        async for event in source.aiter_sse():
            if event.data:
                events.append(json.loads(event.data))
    return events


async def test_an_ag_ui_client_answers_an_interrupt_two_levels_down(
    backend: str, tmp_path: Path
) -> None:
    calls = Calls()
    async with serving(backend, tmp_path, tree(calls, "client", 2), calls) as (_, client):
        run = {
            "threadId": "g",
            "runId": "1",
            "messages": [{"id": "m", "role": "user", "content": "go"}],
        }
        paused = (await ag_ui_run(client, run))[-1]
        assert paused["type"] == "RUN_FINISHED"
        (interrupt,) = paused["outcome"]["interrupts"]
        assert (interrupt["id"], interrupt["subagentRunId"]) == ("g-sub-c-sub-c/x", "g-sub-c-sub-c")
        answer = {"interruptId": interrupt["id"], "status": "resolved", "payload": "fine"}
        done = (await ag_ui_run(client, {**run, "runId": "2", "resume": [answer]}))[-1]
    assert done["outcome"] == {"type": "success"}
    assert done["result"] == "root got [mid got [leaf got fine]]"
