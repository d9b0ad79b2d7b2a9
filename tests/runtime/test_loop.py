"""The step loop of one agent: finishing, recoverable tool errors, limits and the model doubles."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel

from app import AgentRegistry, AgentRuntime, define_agent, define_tool
from app.agents import AgentConfig, ToolContext
from app.errors import LifecycleError, TransientModelError
from app.models import (
    FunctionModel,
    Model,
    ModelEvent,
    ModelRequest,
    ModelResponse,
    RetryingModel,
    ScriptedModel,
    TextDelta,
    ToolCall,
    ToolCallReady,
    Usage,
)
from app.protocol import AssistantMessage, Message, ToolMessage, UserMessage
from app.runtime import RunResult
from tests.support import check_invariants, snapshot


class AddInput(BaseModel):
    a: int
    b: int


class Answer(BaseModel):
    answer: int


async def add(input: AddInput, ctx: ToolContext[Any]) -> int:
    return input.a + input.b


ADD = define_tool("add", description="Add.", input_schema=AddInput)(add)


async def run(
    agent: AgentConfig, message: str = "go", *, flush_delay: float = 0.005
) -> tuple[RunResult, list[str], list[Message]]:
    async with AgentRuntime(AgentRegistry([agent]), flush_delay=flush_delay) as runtime:
        result = await (await runtime.execute(agent, message, session_id="s")).result()
        chunks = [chunk async for chunk in runtime.follow("s")]
        messages = await runtime.store.load_messages("s")
    check_invariants(chunks)
    return result, snapshot(chunks), messages


async def test_an_agent_without_output_schema_finishes_with_its_text() -> None:
    agent = define_agent(
        "talker", model=ScriptedModel([ModelResponse(text="Hello there, friend.")])
    )
    result, chunks, messages = await run(agent)
    assert (result.status, result.output, result.error) == (
        "completed",
        "Hello there, friend.",
        None,
    )
    assert chunks == ["1 s text_delta 'Hello there, friend.'", '2 s output "Hello there, friend."']
    assert messages == [
        UserMessage(content="go"),
        AssistantMessage(content="Hello there, friend."),
    ]


async def test_invalid_finish_arguments_come_back_as_a_tool_error() -> None:
    agent = define_agent(
        "typed",
        tools=[ADD],
        output_schema=Answer,
        model=ScriptedModel(
            [
                ModelResponse(tool_calls=[ToolCall("__finish__", {"answer": "lots"})]),
                ModelResponse(text="Done, really."),
                ModelResponse(tool_calls=[ToolCall("__finish__", {"answer": 42})]),
            ]
        ),
    )
    result, chunks, messages = await run(agent)
    assert (result.status, result.output) == ("completed", {"answer": 42})
    error = (
        "Invalid arguments for tool '__finish__': answer: Input should be a valid integer, unable "
        "to parse string as an integer. Fix the output and call it again."
    )
    assert chunks == [
        '1 s tool_start __finish__#call-0-0 {"answer":"lots"}',
        f"2 s tool_end __finish__#call-0-0 error={error!r}",
        "3 s text_delta 'Done, really.'",
        '4 s output {"answer":42}',
    ]
    assert messages[2] == ToolMessage(
        tool_call_id="call-0-0", tool_name="__finish__", result=None, error=error
    )
    assert messages[4] == UserMessage(
        content="Call the __finish__ tool with your final output to finish."
    )
    assert messages[6] == ToolMessage(
        tool_call_id="call-2-0", tool_name="__finish__", result={"answer": 42}
    )


async def test_bad_arguments_are_recoverable_tool_errors() -> None:
    agent = define_agent(
        "fumbler",
        tools=[ADD],
        model=ScriptedModel(
            [
                ModelResponse(
                    tool_calls=[
                        ToolCall("add", "{'a': 1", id="json"),
                        ToolCall("add", {"a": 1}, id="schema"),
                        ToolCall("add", {"a": 1, "b": 2}, id="good"),
                    ]
                ),
                ModelResponse(text="fixed"),
            ]
        ),
    )
    result, chunks, messages = await run(agent)
    assert result.status == "completed"
    json_error = "Invalid arguments for tool 'add': expected a JSON object, got \"{'a': 1\""
    assert chunks == [
        "1 s tool_start add#json \"{'a': 1\"",
        '2 s tool_start add#schema {"a":1}',
        '3 s tool_start add#good {"a":1,"b":2}',
        f"4 s tool_end add#json error={json_error!r}",
        "5 s tool_end add#schema error=\"Invalid arguments for tool 'add': b: Field required\"",
        "6 s tool_end add#good 3",
        "7 s text_delta 'fixed'",
        '8 s output "fixed"',
    ]
    assert [
        (m.tool_call_id, m.result, m.error) for m in messages if isinstance(m, ToolMessage)
    ] == [
        (
            "json",
            None,
            "Invalid arguments for tool 'add': expected a JSON object, got \"{'a': 1\"",
        ),
        ("schema", None, "Invalid arguments for tool 'add': b: Field required"),
        ("good", 3, None),
    ]


async def test_unknown_tool_is_a_tool_error() -> None:
    class Improviser(Model):
        async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
            if len(request.messages) == 1:
                yield ToolCallReady(ToolCall("teleport", {}, id="t"))
            else:
                yield TextDelta("ok")

    agent = define_agent("improviser", tools=[ADD], model=Improviser())
    result, _, messages = await run(agent)
    assert result.status == "completed"
    assert messages[2] == ToolMessage(
        tool_call_id="t",
        tool_name="teleport",
        error="Unknown tool 'teleport'; available tools: add",
    )


async def test_tool_exceptions_timeouts_and_unserialisable_results_are_tool_errors() -> None:
    class Empty(BaseModel):
        pass

    async def broken(input: Empty, ctx: ToolContext[Any]) -> None:
        raise ValueError("disk on fire")

    async def slow(input: Empty, ctx: ToolContext[Any]) -> str:
        await asyncio.sleep(10)
        return "late"

    def opaque(input: Empty, ctx: ToolContext[Any]) -> object:
        return object()

    tools = [
        define_tool("broken", description="", input_schema=Empty)(broken),
        define_tool("slow", description="", input_schema=Empty, timeout=0.05)(slow),
        define_tool("opaque", description="", input_schema=Empty)(opaque),
    ]
    agent = define_agent(
        "unlucky",
        tools=tools,
        model=ScriptedModel(
            [
                ModelResponse(tool_calls=[ToolCall(t.name, {}, id=t.name) for t in tools]),
                ModelResponse(text="carrying on"),
            ]
        ),
    )
    result, _, messages = await run(agent)
    assert result.status == "completed"
    errors = [m.error for m in messages if isinstance(m, ToolMessage)]
    assert errors[:2] == ["disk on fire", "Tool 'slow' timed out after 0.05s"]
    assert errors[2] is not None
    assert errors[2].startswith("Tool 'opaque' returned a value that is not JSON")


async def test_sync_tools_run_off_the_event_loop() -> None:
    class Empty(BaseModel):
        pass

    threads: list[str] = []

    def blocking(input: Empty, ctx: ToolContext[Any]) -> str:
        threads.append(threading.current_thread().name)
        time.sleep(0.3)
        return "slept"

    agent = define_agent(
        "sleeper",
        tools=[define_tool("blocking", description="", input_schema=Empty)(blocking)],
        model=ScriptedModel(
            [ModelResponse(tool_calls=[ToolCall("blocking", {})]), ModelResponse(text="ok")]
        ),
    )
    gaps: list[float] = []

    async def ticker() -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            await asyncio.sleep(0.01)
            gaps.append(loop.time() - started)

    task = asyncio.create_task(ticker())
    result, _, _ = await run(agent)
    task.cancel()
    assert result.status == "completed"
    assert threads
    assert threads[0] != threading.main_thread().name
    assert max(gaps) < 0.2


async def test_max_steps_fails_the_run() -> None:
    agent = define_agent(
        "looper",
        tools=[ADD],
        max_steps=2,
        model=FunctionModel(
            lambda r: ModelResponse(tool_calls=[ToolCall("add", {"a": 1, "b": 1})])
        ),
    )
    result, chunks, messages = await run(agent)
    assert (result.status, result.error) == ("failed", "Max steps exceeded")
    assert chunks[-1] == "5 s error 'Max steps exceeded'"
    assert sum(isinstance(m, AssistantMessage) for m in messages) == 2


async def test_scripted_model_failures_are_loud() -> None:
    exhausted = define_agent("short", tools=[ADD], model=ScriptedModel([]))
    result, chunks, _ = await run(exhausted)
    error = (
        "ScriptedModel has no response left for session 's' (agent 'short'): its script of 0 "
        "response(s) is used up"
    )
    assert (result.status, result.error) == ("failed", error)
    assert chunks == [f"1 s error {error!r}"]

    confused = define_agent(
        "confused",
        tools=[ADD],
        model=ScriptedModel([ModelResponse(tool_calls=[ToolCall("mul", {})])]),
    )
    result, _, _ = await run(confused)
    assert (result.status, result.error) == (
        "failed",
        "The model called tool 'mul', which was not offered to agent 'confused' (offered: add)",
    )


async def test_scripted_sessions_each_play_the_script_from_the_start() -> None:
    model = ScriptedModel([ModelResponse(text="first"), ModelResponse(text="second")])
    agent = define_agent("echo", model=model)
    async with AgentRuntime(AgentRegistry([agent])) as runtime:
        handles = [await runtime.execute("echo", "hi") for _ in range(3)]
        results = [await handle.result() for handle in handles]
        again = await (await runtime.resume(handles[0].session_id, "more")).result()
    assert [r.output for r in results] == ["first", "first", "first"]
    assert again.output == "second"


async def test_usage_is_summed_per_session() -> None:
    responses = iter(
        [
            ModelResponse(tool_calls=[ToolCall("add", {"a": 1, "b": 2})], usage=Usage(10, 3)),
            ModelResponse(text="3", usage=Usage(25, 1)),
        ]
    )
    agent = define_agent("counter", tools=[ADD], model=FunctionModel(lambda r: next(responses)))
    async with AgentRuntime(AgentRegistry([agent])) as runtime:
        await (await runtime.execute(agent, "go", session_id="u")).result()
        status = await runtime.status("u")
    assert (status.usage.input_tokens, status.usage.output_tokens) == (35, 4)
    assert status.step_count == 2


async def test_the_model_sees_the_conversation_and_tools() -> None:
    seen: list[ModelRequest] = []

    def model(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        return ModelResponse(text="ok")

    agent = define_agent(
        "observer",
        system_prompt="Be brief.",
        tools=[ADD],
        output_schema=None,
        model=FunctionModel(model),
    )
    await run(agent, "question")
    request = seen[0]
    assert (request.session_id, request.agent_type, request.system_prompt, request.step) == (
        "s",
        "observer",
        "Be brief.",
        1,
    )
    assert list(request.messages) == [UserMessage(content="question")]
    assert [(t.name, t.parameters["required"]) for t in request.tools] == [("add", ["a", "b"])]


async def test_the_runtime_must_be_entered() -> None:
    agent = define_agent("idle", model=ScriptedModel([]))
    runtime = AgentRuntime(AgentRegistry([agent]))
    with pytest.raises(LifecycleError, match="async with AgentRuntime"):
        await runtime.execute(agent, "hi")


async def test_a_retried_model_call_commits_only_the_last_attempt() -> None:
    class Flaky(Model):
        attempts = 0

        async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
            self.attempts += 1
            yield TextDelta("Two plus ")
            if self.attempts == 1:
                raise TransientModelError("connection lost")
            yield TextDelta("three is five.")

    agent = define_agent("flaky", model=RetryingModel(Flaky(), base_delay=0.001))
    # No timed flush may commit the failed attempt's delta before the retry is announced.
    result, chunks, messages = await run(agent, flush_delay=60)
    assert (result.status, result.output) == ("completed", "Two plus three is five.")
    assert messages[1] == AssistantMessage(content="Two plus three is five.")
    # The failed attempt's text was not committed yet, so it never reached the stream.
    assert chunks == [
        "1 s text_delta 'Two plus three is five.'",
        '2 s output "Two plus three is five."',
    ]


async def test_a_retry_after_text_reached_the_stream_says_the_step_runs_again() -> None:
    class Flaky(Model):
        attempts = 0

        async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
            self.attempts += 1
            yield TextDelta("Two plus ")
            if self.attempts == 1:
                await asyncio.sleep(0.05)  # the timed flush commits the delta
                raise TransientModelError("connection lost")
            yield TextDelta("three is five.")

    agent = define_agent("flaky", model=RetryingModel(Flaky(), base_delay=0.001))
    result, chunks, _ = await run(agent, flush_delay=0.001)
    assert (result.status, result.output) == ("completed", "Two plus three is five.")
    assert chunks == [
        "1 s text_delta 'Two plus '",
        "2 s step_redo step 1 model_retry",
        "3 s text_delta 'Two plus three is five.'",
        '4 s output "Two plus three is five."',
    ]
