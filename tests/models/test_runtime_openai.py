"""The runtime driving real HTTP model calls: a delegating tree to completion, and an interrupt."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel

from app import AgentRegistry, AgentRuntime, create_sub_agent_tool, define_agent, define_tool
from app.agents import ToolContext
from app.models.openai import OpenAIChatModel
from app.models.retry import RetryingModel
from app.protocol import Chunk, TextDeltaChunk
from tests.models.fake_openai import (
    MODEL,
    FakeOpenAI,
    FakeToolCall,
    Reply,
    StreamReply,
    completion_chunks,
)
from tests.support import check_invariants, snapshot


class AddInput(BaseModel):
    a: int
    b: int


class Task(BaseModel):
    task: str
    a: int
    b: int


class Sum(BaseModel):
    total: int


def tool_names(body: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in body.get("tools", [])]


def tree_replies(body: dict[str, Any]) -> Reply:
    """The peer tree, answered from the conversation each request carries."""
    messages = body["messages"]
    last = messages[-1]
    if "subagent__adder" in tool_names(body):
        if last["role"] == "user":
            calls = [
                FakeToolCall(
                    f"call_p{i}", "subagent__adder", json.dumps({"task": f"t{i}", "a": i, "b": 10})
                )
                for i in range(3)
            ]
            return StreamReply(completion_chunks("", calls))
        results = [message["content"] for message in messages if message["role"] == "tool"]
        return StreamReply(completion_chunks("Totals: " + ", ".join(results)))
    if last["role"] == "user":
        task = json.loads(last["content"])
        add = FakeToolCall("call_add", "add", json.dumps({"a": task["a"], "b": task["b"]}))
        return StreamReply(completion_chunks(f"adding {task['a']}+{task['b']}", [add]))
    total = json.loads(last["content"])
    finish = FakeToolCall("call_finish", "__finish__", json.dumps({"total": total}))
    return StreamReply(completion_chunks("", [finish]))


@pytest.fixture
async def served_model() -> AsyncIterator[tuple[FakeOpenAI, RetryingModel]]:
    async with FakeOpenAI(respond=tree_replies) as server:
        model = RetryingModel(OpenAIChatModel(MODEL, base_url=server.base_url), base_delay=0.01)
        try:
            yield server, model
        finally:
            await model.aclose()


def tree(model: RetryingModel) -> AgentRegistry:
    @define_tool("add", description="Add two integers.", input_schema=AddInput)
    async def add(input: AddInput, ctx: ToolContext[Any]) -> int:
        return input.a + input.b

    child = define_agent(
        "adder", description="Adds two numbers.", tools=[add], output_schema=Sum, model=model
    )
    parent = define_agent(
        "parent",
        system_prompt="Delegate each sum.",
        tools=[create_sub_agent_tool(child, Task)],
        model=model,
    )
    return AgentRegistry([parent, child])


def by_agent(chunks: list[Chunk]) -> dict[str, list[str]]:
    """Each agent's own chunks in order, without sequence numbers (children interleave)."""
    lines: dict[str, list[str]] = {}
    for chunk, line in zip(chunks, snapshot(chunks), strict=True):
        lines.setdefault(chunk.agent_id, []).append(line.split(" ", 2)[2])
    return lines


async def test_delegating_tree_runs_to_completion_over_http(
    served_model: tuple[FakeOpenAI, RetryingModel],
) -> None:
    server, model = served_model
    async with AgentRuntime(tree(model)) as runtime:
        handle = await runtime.execute("parent", "Sum three pairs.", session_id="root")
        result = await handle.result()
        chunks = [chunk async for chunk in runtime.follow("root")]

    assert (result.status, result.output, result.error) == (
        "completed",
        'Totals: {"total": 10}, {"total": 11}, {"total": 12}',
        None,
    )
    check_invariants(chunks)
    expected: dict[str, list[str]] = {
        "root": [
            *(
                f'tool_start subagent__adder#call_p{i} {{"a":{i},"b":10,"task":"t{i}"}}'
                for i in range(3)
            ),
            *(f"subagent_start adder root-sub-call_p{i}" for i in range(3)),
            *(
                line
                for i in range(3)
                for line in (
                    f'subagent_end adder root-sub-call_p{i} {{"total":{10 + i}}}',
                    f'tool_end subagent__adder#call_p{i} {{"total":{10 + i}}}',
                )
            ),
            'text_delta \'Totals: {"total": 10}, {"total": 11}, {"total": 12}\'',
            'output "Totals: {\\"total\\": 10}, {\\"total\\": 11}, {\\"total\\": 12}"',
        ],
    }
    for i in range(3):
        expected[f"root-sub-call_p{i}"] = [
            f"text_delta 'adding {i}+10'",
            f'tool_start add#call_add {{"a":{i},"b":10}}',
            f"tool_end add#call_add {10 + i}",
            f'output {{"total":{10 + i}}}',
        ]
    assert by_agent(chunks) == expected

    # 8 model calls: the parent twice, each child twice; nothing retried.
    assert len(server.requests) == 8
    child_second_calls = [
        request.body["messages"]
        for request in server.requests
        if request.body["messages"][-1]["role"] == "tool" and "add" in tool_names(request.body)
    ]
    assert sorted(child_second_calls, key=lambda messages: messages[0]["content"]) == [
        [
            {"role": "user", "content": f'{{"task":"t{i}","a":{i},"b":10}}'},
            {
                "role": "assistant",
                "content": f"adding {i}+10",
                "tool_calls": [
                    {
                        "id": "call_add",
                        "type": "function",
                        "function": {"name": "add", "arguments": f'{{"a": {i}, "b": 10}}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_add", "content": str(10 + i)},
        ]
        for i in range(3)
    ]


async def test_interrupt_during_a_slow_stream_closes_the_connection() -> None:
    async with FakeOpenAI(
        default=StreamReply(completion_chunks("word " * 400), delay=0.05)
    ) as server:
        model = OpenAIChatModel(MODEL, base_url=server.base_url)
        agent = define_agent("talker", model=RetryingModel(model, base_delay=0.01))
        try:
            async with AgentRuntime(AgentRegistry([agent])) as runtime:
                handle = await runtime.execute("talker", "Talk.", session_id="slow")
                async with asyncio.timeout(5):
                    async for chunk in runtime.follow("slow"):
                        if isinstance(chunk, TextDeltaChunk):
                            break
                loop = asyncio.get_running_loop()
                interrupted_at = loop.time()
                await runtime.interrupt("slow", reason="user stop")
                result = await asyncio.wait_for(handle.result(), 5)
                await asyncio.wait_for(server.disconnected.wait(), 5)
        finally:
            await model.aclose()

    assert result.status == "interrupted"
    assert server.disconnected_at is not None
    assert server.disconnected_at - interrupted_at < 1.0
    assert server.disconnects == 1
    assert len(server.requests) == 1
