"""The suspension cascade: children dropped when their parent pauses start again from scratch,
whole subtrees included."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel

from app import AgentRuntime, create_sub_agent_tool, define_agent, define_tool
from app.agents import AgentHooks, ToolContext
from app.models import FunctionModel, ModelRequest, ModelResponse, ToolCall
from app.protocol import AssistantMessage, ToolMessage
from app.store import StateStore
from tests.runtime.agents import Calls, Sum, Task, adder, registry
from tests.support import until_status


class Question(BaseModel):
    question: str


class Nap(BaseModel):
    seconds: float


def mid_agent(calls: Calls, leaf_started: asyncio.Event) -> Any:
    """Delegates its task to a leaf adder (which sets `leaf_started` when it starts), then
    finishes with the leaf's total."""
    started = AgentHooks(on_agent_start=lambda ctx: leaf_started.set())
    leaf = adder(calls, name="leaf", latency=0.2, hooks=started)

    def model(request: ModelRequest) -> ModelResponse:
        calls["model:mid"] += 1
        results = [m.result for m in request.messages if isinstance(m, ToolMessage)]
        if not results:
            return ModelResponse(
                tool_calls=[ToolCall("subagent__leaf", {"task": "t", "a": 1, "b": 2})]
            )
        return ModelResponse(tool_calls=[ToolCall("__finish__", {"total": results[0]["total"]})])

    return define_agent(
        "mid",
        tools=[create_sub_agent_tool(leaf, Task)],
        output_schema=Sum,
        model=FunctionModel(model, latency=0.05),
    )


async def test_a_child_with_children_dropped_by_a_pause_starts_again(store: StateStore) -> None:
    calls = Calls()
    leaf_started = asyncio.Event()
    ask = define_tool("ask_user", description="Ask the user.", input_schema=Question)

    @define_tool("nap", description="Sleep a while.", input_schema=Nap)
    async def nap(input: Nap, ctx: ToolContext[Any]) -> str:
        calls["nap"] += 1
        await leaf_started.wait()
        await asyncio.sleep(input.seconds)
        return "rested"

    def model(request: ModelRequest) -> ModelResponse:
        calls["model:root"] += 1
        turn = sum(isinstance(m, AssistantMessage) for m in request.messages)
        if turn == 0:
            return ModelResponse(
                tool_calls=[
                    ToolCall("ask_user", {"question": "Go?"}, id="q"),
                    ToolCall("nap", {"seconds": 0.02}, id="n"),
                    ToolCall("subagent__mid", {"task": "t", "a": 1, "b": 2}, id="m"),
                ]
            )
        results = {m.tool_call_id: m.result for m in request.messages if isinstance(m, ToolMessage)}
        return ModelResponse(text=f"answer={results['q']} mid={results['m']}")

    root = define_agent(
        "root",
        tools=[ask, nap, create_sub_agent_tool(mid_agent(calls, leaf_started), Task)],
        model=FunctionModel(model),
    )
    async with AgentRuntime(registry(root), store=store) as runtime:
        first = await (await runtime.execute("root", "go", session_id="r")).result()
        assert first.status == "paused_awaiting_client"
        dropped = await store.get_session("r-sub-m")
        assert (dropped.status, dropped.failure_reason) == ("failed", "parent_suspended")
        handle = await runtime.resume("r", tool_results=[{"toolCallId": "q", "result": "yes"}])
        result = await asyncio.wait_for(handle.result(), 10)
        chunks = [chunk async for chunk in runtime.follow("r")]
        await until_status(store, "r-sub-m-sub-call-0-0", "completed")

    assert (result.status, result.output) == ("completed", "answer=yes mid={'total': 3}")
    assert [chunk.sequence for chunk in chunks] == list(range(1, len(chunks) + 1))
    leaf_refs = await store.get_sub_session_refs("r-sub-m")
    assert [(ref.sub_session_id, ref.status) for ref in leaf_refs] == [
        ("r-sub-m-sub-call-0-0", "completed")
    ]
    assert calls["nap"] == 1


async def test_a_child_asks_the_client_and_the_in_process_api_answers_it(
    store: StateStore,
) -> None:
    """A child's client tool pauses the root; `status` lists it and `resume` answers it by
    session. The sibling the pause drops is not a failure to its hooks."""
    calls = Calls()
    failed: list[str] = []
    ask = define_tool("ask_user", description="Ask the user.", input_schema=Question)

    def asking(request: ModelRequest) -> ModelResponse:
        calls["model:asker"] += 1
        answers = [m.result for m in request.messages if isinstance(m, ToolMessage)]
        if not answers:
            return ModelResponse(tool_calls=[ToolCall("ask_user", {"question": "Sum?"}, id="a")])
        return ModelResponse(tool_calls=[ToolCall("__finish__", {"total": answers[0]})])

    asker = define_agent("asker", tools=[ask], output_schema=Sum, model=FunctionModel(asking))
    hooks = AgentHooks(on_agent_fail=lambda ctx, error: failed.append(ctx.session_id))
    slow = adder(calls, name="slow", latency=1.0, hooks=hooks)

    def model(request: ModelRequest) -> ModelResponse:
        results = {m.tool_call_id: m.result for m in request.messages if isinstance(m, ToolMessage)}
        if not results:
            task = {"task": "t", "a": 1, "b": 2}
            return ModelResponse(
                tool_calls=[
                    ToolCall("subagent__asker", task, id="k"),
                    ToolCall("subagent__slow", task, id="s"),
                ]
            )
        return ModelResponse(text=f"asked={results['k']} slow={results['s']}")

    tools = [create_sub_agent_tool(asker, Task), create_sub_agent_tool(slow, Task)]
    root = define_agent("root", tools=tools, model=FunctionModel(model))
    async with AgentRuntime(registry(root), store=store) as runtime:
        paused = await (await runtime.execute("root", "go", session_id="r")).result()
        status = await runtime.status("r")
        assert paused.status == "paused_awaiting_client"
        assert [(p.session_id, p.tool_call_id, p.reason) for p in status.pending_calls] == [
            ("r-sub-k", "a", "client")
        ]
        handle = await runtime.resume(
            "r", tool_results=[{"session_id": "r-sub-k", "tool_call_id": "a", "result": 9}]
        )
        done = await asyncio.wait_for(handle.result(), 10)
    assert done.output == "asked={'total': 9} slow={'total': 3}"
    assert failed == []
    assert calls["model:asker"] == 2
