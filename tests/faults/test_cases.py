"""Issue 17, cases 1-3, in-process on every store: each a focused, deterministic test.

Every test waits for the stored root to stop (bounded) instead of awaiting the run's handle, so
a run whose task dies with an exception and leaves its session `running` fails the test with
what the store says, not with the exception.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from app import AgentRegistry, AgentRuntime, create_sub_agent_tool, define_agent, define_tool
from app.agents import AgentConfig, ToolContext
from app.errors import AgentServerError
from app.models import FunctionModel, ModelRequest, ModelResponse, ToolCall
from app.protocol import (
    STOPPED_STATUSES,
    AssistantMessage,
    ErrorChunk,
    SubagentStartChunk,
    ToolMessage,
)
from app.settings import Settings
from app.store import MemoryStore, StateStore, create_store
from tests.api.conftest import serve, tree_registry
from tests.databases import database_url
from tests.faults.faulty_store import FaultConfig, FaultyStore, ReadFault, WriteFault
from tests.faults.invariants import Violation, check_quiescent, read_all_chunks, read_tree
from tests.faults.ledger import Ledger
from tests.runtime.agents import Calls
from tests.support import snapshot

SETTLE = 5.0
"""Seconds a run gets to stop; these runs take milliseconds when nothing is wrong."""
RUNTIME: dict[str, Any] = {"lease_ms": 2000, "takeover_interval": None}
"""No takeover loop: a run left `running` stays so (the scenarios cover takeovers)."""


class Job(BaseModel):
    message: str


class Done(BaseModel):
    done: str


class Note(BaseModel):
    note: str


def turn_of(request: ModelRequest) -> int:
    return sum(1 for m in request.messages if isinstance(m, AssistantMessage))


def results(request: ModelRequest) -> list[Any]:
    return [
        m.result if m.error is None else f"error: {m.error}"
        for m in request.messages
        if isinstance(m, ToolMessage)
    ]


async def stopped(store: StateStore, session_id: str, *, timeout: float = SETTLE) -> str:
    """The stored status once it is no longer `running`, or `running` after `timeout`."""
    deadline = asyncio.get_running_loop().time() + timeout
    status = (await store.get_session(session_id)).status
    while status not in STOPPED_STATUSES and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)
        status = (await store.get_session(session_id)).status
    return status


async def whole_tree_report(store: StateStore, root: str) -> str:
    """Every session of the tree with its status, and the stream, for failure messages."""
    tree = await read_tree(store, root)
    assert tree is not None
    lines = [
        f"{r.session_id}: {r.status} owner={r.owner_id} error={r.error}"
        for r in tree.records.values()
    ]
    lines += snapshot(await read_all_chunks(store, root))  # type: ignore[arg-type]
    return "\n".join(lines)


async def invariants(store: StateStore, root: str) -> list[Violation]:
    tree = await read_tree(store, root)
    assert tree is not None
    return await check_quiescent(store, tree, Ledger())


def finishing_leaf(calls: Counter[str], *, call_id: str | None = "call_0") -> AgentConfig:
    """A child that finishes with its message at once (its finish call's id is `call_0`)."""

    def model(request: ModelRequest) -> ModelResponse:
        calls[f"model {request.session_id} {turn_of(request)}"] += 1
        first = request.messages[0]
        return ModelResponse(
            tool_calls=[ToolCall("__finish__", {"done": first.content}, id=call_id)]  # type: ignore[union-attr]
        )

    return define_agent("leaf", output_schema=Done, model=FunctionModel(model))


# -- case 1 -----------------------------------------------------------------------------------


def reusing_root(calls: Counter[str], leaf: AgentConfig, mode: str) -> AgentConfig:
    """`across_steps`: `call_0` for a child in step 1, for a tool in step 2, for a second child
    in step 3 (llama.cpp, vLLM and Ollama number calls afresh in every response).
    `in_one_response`: two children called `call_0` in one response."""

    @define_tool("note", description="Take a note.", input_schema=Note)
    async def note(input: Note, ctx: ToolContext[Any]) -> str:
        calls[f"tool {ctx.session_id} {ctx.tool_call_id} {input.note}"] += 1
        return input.note

    def model(request: ModelRequest) -> ModelResponse:
        turn = turn_of(request)
        calls[f"model {request.session_id} {turn}"] += 1
        if mode == "in_one_response" and turn == 0:
            return ModelResponse(
                tool_calls=[
                    ToolCall("subagent__leaf", {"message": "one"}, id="call_0"),
                    ToolCall("subagent__leaf", {"message": "two"}, id="call_0"),
                ]
            )
        if mode == "across_steps" and turn < 3:
            if turn == 1:
                return ModelResponse(tool_calls=[ToolCall("note", {"note": "n"}, id="call_0")])
            message = "one" if turn == 0 else "three"
            return ModelResponse(
                tool_calls=[ToolCall("subagent__leaf", {"message": message}, id="call_0")]
            )
        return ModelResponse(text="results: " + " | ".join(map(str, results(request))))

    return define_agent(
        "root", tools=[note, create_sub_agent_tool(leaf, Job)], model=FunctionModel(model)
    )


@pytest.mark.parametrize("mode", ["across_steps", "in_one_response"])
async def test_case_1_a_model_reusing_a_tool_call_id_never_hangs_the_run(
    store: StateStore, mode: str
) -> None:
    calls: Counter[str] = Counter()
    root = reusing_root(calls, finishing_leaf(calls), mode)
    async with AgentRuntime(AgentRegistry([root]), store=store, **RUNTIME) as runtime:
        handle = await runtime.execute(root, "go", session_id="r")
        status = await stopped(store, "r")
        report = await whole_tree_report(store, "r")
        outcome = await _outcome(handle.result())
        chunks = await read_all_chunks(store, "r")
        record = await store.get_session("r")
        found = await invariants(store, "r") if status != "running" else []

    assert status == "completed", f"the run stayed {status} ({outcome})\n{report}"
    expected = (
        "results: {'done': 'one'} | n | {'done': 'three'}"
        if mode == "across_steps"
        else "results: {'done': 'one'} | {'done': 'two'}"
    )
    assert record.output == expected, report
    # Each call got a child of its own (DESIGN §3: derived ids are unique within the session).
    children = [c.sub_session_id for c in chunks if isinstance(c, SubagentStartChunk)]
    assert len(children) == len(set(children)) == 2, report
    assert found == [], report
    # Nothing ran twice: every model call of the tree once, each tool call once.
    assert set(calls.values()) == {1}, calls


async def _outcome(result: Any) -> str:
    """What a run's handle gives, without waiting for a run that never ends."""
    try:
        async with asyncio.timeout(0.5):
            return str(await result)
    except TimeoutError:
        return "the handle never settled"
    except AgentServerError as exc:
        return f"the run's task raised {type(exc).__name__}: {exc}"


# -- case 2 -----------------------------------------------------------------------------------


def cascade_tree(calls: Counter[str], leaf_pause: dict[str, float]) -> AgentConfig:
    """The issue's tree: the root's first response asks the client, runs a slow tool and
    `subagent__mid`; `mid` calls `subagent__leaf`, which is still running when the root
    suspends, so `mid` and its leaf are dropped (`parent_suspended`)."""

    async def leaf_model(request: ModelRequest) -> ModelResponse:
        calls[f"model {request.session_id} {turn_of(request)}"] += 1
        await asyncio.sleep(leaf_pause.get("leaf", 0))
        return ModelResponse(tool_calls=[ToolCall("__finish__", {"done": "leaf"})])

    leaf = define_agent("leaf", output_schema=Done, model=FunctionModel(leaf_model))

    def mid_model(request: ModelRequest) -> ModelResponse:
        calls[f"model {request.session_id} {turn_of(request)}"] += 1
        if turn_of(request) == 0:
            return ModelResponse(tool_calls=[ToolCall("subagent__leaf", {"message": "deep"})])
        return ModelResponse(tool_calls=[ToolCall("__finish__", {"done": str(results(request))})])

    mid = define_agent(
        "mid",
        tools=[create_sub_agent_tool(leaf, Job)],
        output_schema=Done,
        model=FunctionModel(mid_model),
    )

    @define_tool("slow", description="A slow lookup.", input_schema=Note)
    async def slow(input: Note, ctx: ToolContext[Any]) -> str:
        calls[f"tool {ctx.session_id} {ctx.tool_call_id}"] += 1
        await asyncio.sleep(0.2)
        return "looked up"

    ask = define_tool("ask_user", description="Ask the user.", input_schema=Note)

    def root_model(request: ModelRequest) -> ModelResponse:
        calls[f"model {request.session_id} {turn_of(request)}"] += 1
        if turn_of(request) == 0:
            return ModelResponse(
                tool_calls=[
                    ToolCall("ask_user", {"note": "ok?"}, id="ask"),
                    ToolCall("slow", {"note": "x"}, id="look"),
                    ToolCall("subagent__mid", {"message": "middle"}, id="mid"),
                ]
            )
        return ModelResponse(text="results: " + " | ".join(map(str, results(request))))

    return define_agent(
        "root",
        tools=[ask, slow, create_sub_agent_tool(mid, Job)],
        model=FunctionModel(root_model),
    )


async def test_case_2_the_cascade_respawns_a_child_that_had_children(store: StateStore) -> None:
    calls: Counter[str] = Counter()
    pause = {"leaf": 5.0}
    root = cascade_tree(calls, pause)
    async with AgentRuntime(AgentRegistry([root]), store=store, **RUNTIME) as runtime:
        await runtime.execute(root, "go", session_id="c")
        paused = await stopped(store, "c")
        dropped = {
            r.session_id: (r.status, r.failure_reason)
            for r in (await read_tree(store, "c") or _no_tree()).records.values()
        }
        assert paused == "paused_awaiting_client", await whole_tree_report(store, "c")
        assert dropped["c-sub-mid"] == ("failed", "parent_suspended"), dropped

        pause["leaf"] = 0
        handle = await runtime.resume("c", tool_results=[{"toolCallId": "ask", "result": "yes"}])
        status = await stopped(store, "c")
        report = await whole_tree_report(store, "c")
        outcome = await _outcome(handle.result())
        tree = await read_tree(store, "c")
        found = await invariants(store, "c") if status != "running" else []

    assert status == "completed", f"the resumed run stayed {status} ({outcome})\n{report}"
    assert tree is not None
    assert {r.session_id: r.status for r in tree.records.values()} == {
        "c": "completed",
        "c-sub-mid": "completed",
        "c-sub-mid-sub-call-0-0": "completed",
    }, report
    assert found == [], report
    # `mid` started again from scratch (its first model call twice), the tool ran once.
    assert calls["model c-sub-mid 0"] == 2
    assert calls["tool c look"] == 1


def _no_tree() -> Any:
    raise AssertionError("the root does not exist")


# -- case 3 -----------------------------------------------------------------------------------

VALUES = {
    "nul": "a\x00b",
    "lone_surrogate": "a\ud800b",
}


def echoing_root(where: str, value: Any) -> AgentConfig:
    """An agent whose model puts `value` in its text (`text`), or in a tool's arguments
    (`arguments`), then finishes."""

    @define_tool("note", description="Take a note.", input_schema=Note)
    async def note(input: Note, ctx: ToolContext[Any]) -> str:
        return "noted"

    def model(request: ModelRequest) -> ModelResponse:
        if where == "arguments" and turn_of(request) == 0:
            return ModelResponse(tool_calls=[ToolCall("note", {"note": "x", "extra": value})])
        if where == "text" and turn_of(request) == 0:
            return ModelResponse(text=f"echo {value}")
        return ModelResponse(text="done")

    return define_agent("root", tools=[note], model=FunctionModel(model))


@contextlib.asynccontextmanager
async def each_store(tmp_path: Path) -> AsyncIterator[dict[str, StateStore]]:
    """One open store of every backend."""
    async with (
        MemoryStore() as memory,
        database_url("sqlite", tmp_path) as sqlite_url,
        create_store(sqlite_url) as sqlite,
        database_url("postgres", tmp_path) as postgres_url,
        create_store(postgres_url) as postgres,
    ):
        yield {"memory": memory, "sqlite": sqlite, "postgres": postgres}


async def _ending(store: StateStore, agent: AgentConfig, message: str) -> tuple[str, str]:
    """Run `agent` on `store`; how the session ended and what was wrong with the ending."""
    async with AgentRuntime(AgentRegistry([agent]), store=store, **RUNTIME) as runtime:
        try:
            await runtime.execute(agent, message, session_id="v")
        except AgentServerError as exc:
            # Refused before anything was stored is a clean ending too: nothing changed.
            return f"refused ({type(exc).__name__})", ""
        status = await stopped(store, "v")
        if status == "running":
            return status, "stayed running\n" + await whole_tree_report(store, "v")
        found = await invariants(store, "v")
        chunks = await read_all_chunks(store, "v")
        if status == "failed" and not any(isinstance(c, ErrorChunk) for c in chunks):
            found.append(Violation("missing_end_chunk", "failed without an error chunk"))
        return status, "\n".join(map(str, found))


@pytest.mark.parametrize("value", sorted(VALUES))
@pytest.mark.parametrize("where", ["message", "text", "arguments"])
async def test_case_3_a_value_a_store_cannot_hold_ends_the_run_alike_on_every_store(
    tmp_path: Path, where: str, value: str
) -> None:
    agent = echoing_root("text" if where == "message" else where, VALUES[value])
    message = f"start {VALUES[value]}" if where == "message" else "go"
    endings = {}
    async with each_store(tmp_path) as stores:
        for backend, store in stores.items():
            endings[backend] = await _ending(store, agent, message)
    # Each store ends the run cleanly (stopped, its stream ended, an error chunk if it failed)...
    assert {backend: problem for backend, (_, problem) in endings.items() if problem} == {}
    # ...and all three the same way (DESIGN §9).
    assert len({status for status, _ in endings.values()}) == 1, endings


async def test_case_3_nan_in_tool_arguments_ends_the_run_alike_on_every_store(
    tmp_path: Path,
) -> None:
    agent = echoing_root("arguments", float("nan"))
    endings = {}
    async with each_store(tmp_path) as stores:
        for backend, store in stores.items():
            endings[backend] = await _ending(store, agent, "go")
    assert {backend: problem for backend, (_, problem) in endings.items() if problem} == {}
    assert len({status for status, _ in endings.values()}) == 1, endings


async def test_case_3_a_commit_the_database_refuses_ends_the_session_failed(
    store: StateStore,
) -> None:
    # The database refuses the write of the run's first step (as PostgreSQL refuses a value it
    # cannot hold), on any store: the session ends failed, with an error chunk and its end.
    ledger = Ledger()
    faulty = FaultyStore(
        store,
        FaultConfig(seed=3, write_rate=1.0, write_kinds=(WriteFault.VALUE_REFUSED,), max_faults=1),
        ledger,
    )
    calls: Counter[str] = Counter()
    agent = reusing_root(calls, finishing_leaf(calls, call_id=None), "in_one_response")
    async with faulty, AgentRuntime(AgentRegistry([agent]), store=faulty, **RUNTIME) as runtime:
        await runtime.execute(agent, "go", session_id="r")
        faulty.arm()  # the creation landed; the first step's write is refused
        status = await stopped(store, "r", timeout=5.0)
        report = await whole_tree_report(store, "r")
        chunks = await read_all_chunks(store, "r")
        stream = await store.get_stream("r")
    assert status == "failed", f"the session stayed {status} after a refused commit\n{report}"
    assert stream.status == "failed", report
    assert any(isinstance(c, ErrorChunk) and c.agent_id == "r" for c in chunks), report


# -- found beyond the eight ---------------------------------------------------------------------


async def test_a_lone_surrogate_in_a_start_body_is_answered_alike_and_never_5xx(
    tmp_path: Path,
) -> None:
    # DESIGN §9: bad unicode is a client error, on every store alike, and no database message
    # reaches the client. A JSON `\ud800` escape decodes to a lone surrogate.
    body = '{"agentType": "parent", "message": "hi \\ud800 there", "sessionId": "u1"}'
    answers = {}
    for backend in ("memory", "sqlite", "postgres"):
        async with contextlib.AsyncExitStack() as stack:
            url = "memory://"
            if backend != "memory":
                url = await stack.enter_async_context(database_url(backend, tmp_path / backend))
            calls = Calls()
            server = await stack.enter_async_context(
                serve(tree_registry(calls), calls, Settings(database_url=url))
            )
            client = await stack.enter_async_context(
                httpx.AsyncClient(base_url=server.url, timeout=10)
            )
            answer = await client.post(
                "/start", content=body, headers={"content-type": "application/json"}
            )
            answers[backend] = (answer.status_code, answer.text[:160])
    assert all(code < 500 for code, _ in answers.values()), answers
    assert len({code for code, _ in answers.values()}) == 1, answers


async def test_an_interrupt_is_not_lost_when_its_flag_check_fails_once(store: StateStore) -> None:
    # The process running the session hears of the interrupt and checks the flag; the store
    # fails that one check. The flag is still raised: the run must still stop.
    faulty = FaultyStore(
        store,
        FaultConfig(
            seed=1,
            read_rate=1.0,
            read_kinds=(ReadFault.STORE_ERROR,),
            read_methods=frozenset({"check_flag"}),
            max_faults=1,
        ),
        Ledger(),
    )

    async def thinking(request: ModelRequest) -> ModelResponse:
        await asyncio.sleep(30)
        return ModelResponse(text="done")

    agent = define_agent("slow", model=FunctionModel(thinking))
    async with faulty, AgentRuntime(AgentRegistry([agent]), store=faulty, **RUNTIME) as runtime:
        await runtime.execute(agent, "go", session_id="i")
        faulty.arm()
        assert await runtime.interrupt("i", "stop") == "running"
        status = await stopped(store, "i")
        injected = dict(faulty.injected)
    assert injected == {"read:store_error": 1}
    assert status == "interrupted", f"the interrupt was lost: the session is {status}"
