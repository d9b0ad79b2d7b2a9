"""In-process sub-agents: parallel, nested, failing, isolated, observed by hooks."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from pydantic import BaseModel

from app import AgentRuntime, create_sub_agent_tool, define_agent, define_tool
from app.agents import AgentHooks, HookContext, ToolContext
from app.models import FunctionModel, ModelRequest, ModelResponse, ScriptedModel, ToolCall
from app.protocol import Chunk, ToolMessage
from tests.runtime.agents import Calls, Sum, Task, adder, delegator, registry
from tests.support import check_invariants, snapshot


async def collect(runtime: AgentRuntime, session_id: str) -> list[Chunk]:
    return [chunk async for chunk in runtime.follow(session_id)]


async def test_parallel_children_stream_and_results() -> None:
    calls = Calls()
    parent = delegator(calls, adder(calls))
    async with AgentRuntime(registry(parent)) as runtime:
        handle = await runtime.execute("parent", "sum things", session_id="root")
        result = await handle.result()
        chunks = await collect(runtime, "root")
        status = await runtime.status("root")
        messages = await runtime.store.load_messages("root")

    assert (result.status, result.output) == (
        "completed",
        "results: {'total': 10}; {'total': 11}; {'total': 12}",
    )
    check_invariants(chunks)
    child = "root-sub-call-0-{}".format
    expected = [
        '1 root tool_start subagent__adder#call-0-0 {"a":0,"b":10,"task":"t0"}',
        '2 root tool_start subagent__adder#call-0-1 {"a":1,"b":10,"task":"t1"}',
        '3 root tool_start subagent__adder#call-0-2 {"a":2,"b":10,"task":"t2"}',
    ]
    sequence = 3
    for i in range(3):
        expected.append(f"{sequence + 1} root subagent_start adder {child(i)}")
        sequence += 1
    for i in range(3):
        expected += [
            f"{sequence + 1} {child(i)} text_delta 'adding {i}+10'",
            f'{sequence + 2} {child(i)} tool_start add#call-0-0 {{"a":{i},"b":10}}',
            f"{sequence + 3} {child(i)} tool_end add#call-0-0 {10 + i}",
            f'{sequence + 4} {child(i)} output {{"total":{10 + i}}}',
        ]
        sequence += 4
    for i in range(3):
        expected += [
            f'{sequence + 1} root subagent_end adder {child(i)} {{"total":{10 + i}}}',
            f'{sequence + 2} root tool_end subagent__adder#call-0-{i} {{"total":{10 + i}}}',
        ]
        sequence += 2
    expected += [
        f"{sequence + 1} root text_delta \"results: {{'total': 10}}; {{'total': 11}}; "
        "{'total': 12}\"",
        f"{sequence + 2} root output \"results: {{'total': 10}}; {{'total': 11}}; "
        "{'total': 12}\"",
    ]
    assert snapshot(chunks) == expected
    assert [m.result for m in messages if isinstance(m, ToolMessage)] == [
        {"total": 10},
        {"total": 11},
        {"total": 12},
    ]
    assert [
        (ref.sub_session_id, ref.agent_type, ref.parent_tool_call_id, ref.status, ref.mode)
        for ref in status.sub_sessions
    ] == [(child(i), "adder", f"call-0-{i}", "completed", "ephemeral") for i in range(3)]
    assert all(
        ref.completed_at is not None and ref.completed_at >= ref.started_at
        for ref in status.sub_sessions
    )
    assert calls == {"model:parent": 2, "model:adder": 6, "add": 3}


async def test_children_really_run_in_parallel() -> None:
    latency = 0.1
    calls = Calls()
    spans: dict[str, list[float]] = {}

    def before(ctx: HookContext, agent_type: str, sub_session_id: str, input: Any) -> None:
        spans[sub_session_id] = [time.perf_counter()]

    def after(ctx: HookContext, agent_type: str, sub_session_id: str, result: Any) -> None:
        spans[sub_session_id].append(time.perf_counter())

    parent = delegator(
        calls,
        adder(calls, latency=latency),
        latency=latency,
        hooks=AgentHooks(before_sub_agent=before, after_sub_agent=after),
    )
    async with AgentRuntime(registry(parent)) as runtime:
        started = time.perf_counter()
        handle = await runtime.execute("parent", "go", session_id="root")
        result = await handle.result()
        elapsed = time.perf_counter() - started
        chunks = await collect(runtime, "root")

    assert result.status == "completed"
    check_invariants(chunks)
    # Critical path: 4 model calls. One after another the 8 calls would take twice as long.
    assert elapsed < 6 * latency, elapsed
    assert max(start for start, _ in spans.values()) < min(end for _, end in spans.values())


class Verdict(BaseModel):
    verdict: str


class Text(BaseModel):
    text: str


def script(*responses: ModelResponse) -> ScriptedModel:
    return ScriptedModel(list(responses))


async def test_three_levels_of_nesting() -> None:
    sentiment = define_agent(
        "sentiment",
        output_schema=Verdict,
        model=script(
            ModelResponse(
                text="Analyzing...", tool_calls=[ToolCall("__finish__", {"verdict": "positive"})]
            )
        ),
    )
    processor = define_agent(
        "processor",
        tools=[create_sub_agent_tool(sentiment, Text)],
        output_schema=Verdict,
        model=script(
            ModelResponse(
                text="Processing...",
                tool_calls=[ToolCall("subagent__sentiment", {"text": "great"}, id="s1")],
            ),
            ModelResponse(tool_calls=[ToolCall("__finish__", {"verdict": "processed: positive"})]),
        ),
    )
    orchestrator = define_agent(
        "orchestrator",
        tools=[create_sub_agent_tool(processor, Text)],
        model=script(
            ModelResponse(
                text="Let me analyze...",
                tool_calls=[ToolCall("subagent__processor", {"text": "great"}, id="p1")],
            ),
            ModelResponse(text="Based on the analysis, positive."),
        ),
    )
    async with AgentRuntime(registry(orchestrator)) as runtime:
        result = await (await runtime.execute("orchestrator", "go", session_id="o")).result()
        chunks = await collect(runtime, "o")
        nested = await runtime.status("o-sub-p1")

    assert (result.status, result.output) == ("completed", "Based on the analysis, positive.")
    check_invariants(chunks)
    assert snapshot(chunks) == [
        "1 o text_delta 'Let me analyze...'",
        '2 o tool_start subagent__processor#p1 {"text":"great"}',
        "3 o subagent_start processor o-sub-p1",
        "4 o-sub-p1 text_delta 'Processing...'",
        '5 o-sub-p1 tool_start subagent__sentiment#s1 {"text":"great"}',
        "6 o-sub-p1 subagent_start sentiment o-sub-p1-sub-s1",
        "7 o-sub-p1-sub-s1 text_delta 'Analyzing...'",
        '8 o-sub-p1-sub-s1 output {"verdict":"positive"}',
        '9 o-sub-p1 subagent_end sentiment o-sub-p1-sub-s1 {"verdict":"positive"}',
        '10 o-sub-p1 tool_end subagent__sentiment#s1 {"verdict":"positive"}',
        '11 o-sub-p1 output {"verdict":"processed: positive"}',
        '12 o subagent_end processor o-sub-p1 {"verdict":"processed: positive"}',
        '13 o tool_end subagent__processor#p1 {"verdict":"processed: positive"}',
        "14 o text_delta 'Based on the analysis, positive.'",
        '15 o output "Based on the analysis, positive."',
    ]
    assert (nested.parent_session_id, nested.stream_id) == ("o", "o")
    assert [(r.sub_session_id, r.status) for r in nested.sub_sessions] == [
        ("o-sub-p1-sub-s1", "completed")
    ]


async def test_failed_children_become_tool_errors_and_the_parent_goes_on() -> None:
    def explode(request: ModelRequest) -> ModelResponse:
        raise RuntimeError("Analysis failed: text too short")

    def loop_forever(request: ModelRequest) -> ModelResponse:
        return ModelResponse(tool_calls=[ToolCall("noop", {})])

    class Empty(BaseModel):
        pass

    noop = define_tool("noop", description="Nothing.", input_schema=Empty)(lambda i, c: "ok")
    failing = define_agent("failing", output_schema=Sum, model=FunctionModel(explode))
    looping = define_agent(
        "looping", tools=[noop], output_schema=Sum, model=FunctionModel(loop_forever), max_steps=2
    )
    slow = define_agent(
        "slow",
        output_schema=Sum,
        model=ScriptedModel([ModelResponse(text="thinking hard")], latency=5),
    )
    tools = [
        create_sub_agent_tool(failing, Task),
        create_sub_agent_tool(looping, Task),
        create_sub_agent_tool(slow, Task, timeout=0.2),
    ]
    seen: list[ToolMessage] = []

    def parent_model(request: ModelRequest) -> ModelResponse:
        results = [m for m in request.messages if isinstance(m, ToolMessage)]
        if results:
            seen.extend(results)
            return ModelResponse(text="recovered")
        return ModelResponse(
            tool_calls=[
                ToolCall(tool.name, {"task": "x", "a": 1, "b": 2}, id=f"c{i}")
                for i, tool in enumerate(tools)
            ]
        )

    parent = define_agent("parent", tools=tools, model=FunctionModel(parent_model))
    async with AgentRuntime(registry(parent)) as runtime:
        started = time.perf_counter()
        result = await (await runtime.execute("parent", "go", session_id="p")).result()
        elapsed = time.perf_counter() - started
        chunks = await collect(runtime, "p")
        refs = (await runtime.status("p")).sub_sessions
        slow_child = await runtime.status("p-sub-c2")

    assert (result.status, result.output) == ("completed", "recovered")
    assert elapsed < 2
    check_invariants(chunks)
    timed_out = "Sub-agent 'slow' timed out after 0.2s"
    assert [(m.tool_call_id, m.result, m.error) for m in seen] == [
        (
            "c0",
            {"success": False, "error": "Analysis failed: text too short"},
            "Analysis failed: text too short",
        ),
        ("c1", {"success": False, "error": "Max steps exceeded"}, "Max steps exceeded"),
        ("c2", {"success": False, "error": timed_out}, timed_out),
    ]
    assert [(r.sub_session_id, r.status) for r in refs] == [
        ("p-sub-c0", "failed"),
        ("p-sub-c1", "failed"),
        ("p-sub-c2", "failed"),
    ]
    assert (slow_child.status, slow_child.error) == ("failed", timed_out)
    ends = [c for c in chunks if c.type == "subagent_end"]
    assert [c.result for c in ends] == [
        {"success": False, "error": "Analysis failed: text too short"},
        {"success": False, "error": "Max steps exceeded"},
        {"success": False, "error": timed_out},
    ]


async def test_sub_agent_state_is_isolated() -> None:
    class ParentState(BaseModel):
        counter: int = 0

    class ChildState(BaseModel):
        counter: int = 0
        a: int = -1

    class Empty(BaseModel):
        pass

    async def bump(input: Empty, ctx: ToolContext[Any]) -> int:
        ctx.state.counter += 100 if ctx.agent_type == "parent" else 1
        return int(ctx.state.counter)

    bump_tool = define_tool("bump", description="Bump.", input_schema=Empty)(bump)
    child = define_agent(
        "child",
        tools=[bump_tool],
        output_schema=Sum,
        state_schema=ChildState,
        model=script(
            ModelResponse(tool_calls=[ToolCall("bump", {}), ToolCall("bump", {})]),
            ModelResponse(tool_calls=[ToolCall("__finish__", {"total": 2})]),
        ),
    )
    parent = define_agent(
        "parent",
        tools=[bump_tool, create_sub_agent_tool(child, Task)],
        state_schema=ParentState,
        model=script(
            ModelResponse(
                tool_calls=[
                    ToolCall("bump", {}),
                    ToolCall("subagent__child", {"task": "t", "a": 7, "b": 0}, id="k"),
                ]
            ),
            ModelResponse(text="done"),
        ),
    )
    async with AgentRuntime(registry(parent)) as runtime:
        await (await runtime.execute("parent", "go", session_id="p")).result()
        parent_record = await runtime.store.get_session("p")
        child_record = await runtime.store.get_session("p-sub-k")

    assert parent_record.state == {"counter": 100}
    # The child's state starts from its own defaults plus the input fields it declares.
    assert child_record.state == {"counter": 2, "a": 7}
    assert child_record.input == {"task": "t", "a": 7, "b": 0}


async def test_hooks_fire_once_each_in_order() -> None:
    events: list[str] = []

    def recorder(name: str) -> Any:
        def hook(ctx: HookContext, *args: Any) -> None:
            events.append(f"{name} {ctx.session_id}")

        return hook

    async def async_complete(ctx: HookContext, output: Any) -> None:
        await asyncio.sleep(0)
        events.append(f"complete {ctx.session_id} {output}")

    def broken(ctx: HookContext) -> None:
        raise ValueError("a broken hook never fails the run")

    hooks = AgentHooks(
        on_agent_start=recorder("start"),
        on_agent_complete=async_complete,
        on_agent_fail=recorder("fail"),
        before_sub_agent=recorder("before"),
        after_sub_agent=recorder("after"),
    )
    calls = Calls()
    child = adder(calls, hooks=hooks)
    failing = define_agent(
        "failing", output_schema=Sum, model=script(), hooks=AgentHooks(on_agent_start=broken)
    )
    parent = define_agent(
        "parent",
        tools=[create_sub_agent_tool(child, Task), create_sub_agent_tool(failing, Task)],
        model=script(
            ModelResponse(
                tool_calls=[ToolCall("subagent__adder", {"task": "t", "a": 1, "b": 2}, id="a")]
            ),
            ModelResponse(
                tool_calls=[ToolCall("subagent__failing", {"task": "t", "a": 1, "b": 2}, id="f")]
            ),
            ModelResponse(text="end"),
        ),
        hooks=hooks,
    )
    async with AgentRuntime(registry(parent)) as runtime:
        result = await (await runtime.execute("parent", "go", session_id="p")).result()

    assert result.status == "completed"
    assert events == [
        "start p",
        "before p",
        "start p-sub-a",
        "complete p-sub-a {'total': 3}",
        "after p",
        "before p",
        "after p",
        "complete p end",
    ]


async def test_a_client_can_follow_the_stream_while_it_runs() -> None:
    calls = Calls()
    parent = delegator(calls, adder(calls, latency=0.05), latency=0.05)
    async with AgentRuntime(registry(parent)) as runtime:
        handle = await runtime.execute("parent", "go", session_id="root")
        live: list[tuple[Chunk, bool]] = []
        async for chunk in handle.stream():
            live.append((chunk, handle._task.done()))
        result = await handle.result()
        stored = await collect(runtime, "root")
        after_five = [chunk async for chunk in handle.stream(from_sequence=5)]

    assert result.status == "completed"
    assert [chunk for chunk, _ in live] == stored
    assert not live[0][1], "the first chunk arrived only after the run had finished"
    assert after_five == stored[5:]
