"""Values no store can hold (a NUL, a lone surrogate, NaN, a huge integer) and writes the store
refuses: a run behaves the same on every store, and never stays `running` with no one on it."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from app import AgentRuntime, create_sub_agent_tool, define_agent, define_tool
from app.agents import ToolContext
from app.errors import StoreRefusedError
from app.models import FunctionModel, ModelRequest, ModelResponse, ToolCall, Usage
from app.protocol import AssistantMessage, ErrorChunk, ToolMessage, UserMessage
from app.protocol.values import REPLACEMENT, clean_json, clean_text
from app.runtime.tree import REFUSED_WRITE
from app.store import StateStore, WriteBatch
from tests.runtime.agents import Calls, Sum, Task, adder, registry

DIRTY = "a\x00b\ud800c"
CLEAN = f"a{REPLACEMENT}b{REPLACEMENT}c"


class Echo(BaseModel):
    text: str


class Notes(BaseModel):
    note: str = ""
    score: float = 0.0


def test_clean_values() -> None:
    assert clean_text(DIRTY) == CLEAN
    assert clean_text("plain") == "plain"
    assert clean_text("été") == "été"
    dirty = {DIRTY: [DIRTY, math.nan, math.inf, 2**70, -(2**70), True, None, 1.5]}
    assert clean_json(dirty) == {CLEAN: [CLEAN, None, None, 2**63 - 1, -(2**63), True, None, 1.5]}
    clean = {"a": [1, "b", None]}
    assert clean_json(clean) is clean


async def test_a_run_full_of_unstorable_values_completes_alike_on_every_store(
    store: StateStore,
) -> None:
    @define_tool("echo", description="Echo.", input_schema=Echo)
    async def echo(input: Echo, ctx: ToolContext[Any]) -> dict[str, Any]:
        ctx.state.note = input.text
        ctx.state.score = math.nan
        return {"echo": input.text, "nan": math.nan, "big": 2**80}

    def model(request: ModelRequest) -> ModelResponse:
        if not any(isinstance(m, ToolMessage) for m in request.messages):
            return ModelResponse(
                text=DIRTY,
                tool_calls=[ToolCall("echo", {"text": DIRTY, "x": math.nan}, id=DIRTY)],
                usage=Usage(2**70, 1),
            )
        return ModelResponse(text=f"done {DIRTY}")

    agent = define_agent("dirty", tools=[echo], state_schema=Notes, model=FunctionModel(model))
    async with AgentRuntime(registry(agent), store=store) as runtime:
        result = await (await runtime.execute("dirty", DIRTY, session_id="d")).result()
        chunks = [chunk async for chunk in runtime.follow("d")]
        record = await store.get_session("d")
        messages = await store.load_messages("d")

    assert (result.status, result.output) == ("completed", f"done {CLEAN}")
    assert (record.status, record.output, record.state) == (
        "completed",
        f"done {CLEAN}",
        {"note": CLEAN, "score": None},
    )
    assert record.input_tokens == 2**63 - 1
    assert messages[0] == UserMessage(content=CLEAN)
    first = messages[1]
    assert isinstance(first, AssistantMessage)
    assert first.content == CLEAN
    (call,) = first.tool_calls
    assert (call.id, call.original_id, call.arguments) == (
        "call-0-0",
        CLEAN,
        {"text": CLEAN, "x": None},
    )
    tool_message = messages[2]
    assert isinstance(tool_message, ToolMessage)
    assert tool_message.result == {"echo": CLEAN, "nan": None, "big": 2**63 - 1}
    assert [chunk.sequence for chunk in chunks] == list(range(1, len(chunks) + 1))


def refusing(store: StateStore, poisoned: Callable[[WriteBatch], bool]) -> None:
    """Make `store` refuse, as a database refuses a value it cannot hold, every batch that
    `poisoned` picks."""
    submit = store.submit

    def refuse(batch: WriteBatch, *, hold: bool = False) -> asyncio.Future[None]:
        if not poisoned(batch):
            return submit(batch, hold=hold)
        outcome: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        outcome.set_exception(StoreRefusedError("Could not commit: DataError: poisoned value"))
        return outcome

    store.submit = refuse  # type: ignore[method-assign]


def has_poison(batch: WriteBatch) -> bool:
    return any(
        isinstance(append.message, AssistantMessage) and "poison" in append.message.content
        for append in batch.messages
    )


async def test_a_refused_write_ends_the_whole_tree_failed(store: StateStore) -> None:
    calls = Calls()

    def poisoned_child(request: ModelRequest) -> ModelResponse:
        if any(isinstance(m, ToolMessage) for m in request.messages):
            return ModelResponse(tool_calls=[ToolCall("__finish__", {"total": 1})])
        return ModelResponse(text="poison", tool_calls=[ToolCall("echo", {"text": "x"})])

    @define_tool("echo", description="Echo.", input_schema=Echo)
    async def echo(input: Echo, ctx: ToolContext[Any]) -> str:
        return input.text

    bad = define_agent("bad", tools=[echo], output_schema=Sum, model=FunctionModel(poisoned_child))
    slow = adder(calls, name="slow", latency=2.0)

    def root_model(request: ModelRequest) -> ModelResponse:
        return ModelResponse(
            tool_calls=[
                ToolCall("subagent__bad", {"task": "b", "a": 1, "b": 1}),
                ToolCall("subagent__slow", {"task": "s", "a": 1, "b": 1}),
            ]
        )

    root = define_agent(
        "root",
        tools=[create_sub_agent_tool(bad, Task), create_sub_agent_tool(slow, Task)],
        model=FunctionModel(root_model),
    )
    refusing(store, has_poison)
    async with AgentRuntime(registry(root), store=store) as runtime:
        result = await asyncio.wait_for(
            (await runtime.execute("root", "go", session_id="r")).result(), 10
        )
        chunks = [chunk async for chunk in runtime.follow("r")]
        statuses = {
            session_id: (await store.get_session(session_id)).status
            for session_id in ("r", "r-sub-call-0-0", "r-sub-call-0-1")
        }
        refs = await store.get_sub_session_refs("r")
        stream = await store.get_stream("r")

    assert (result.status, result.error) == ("failed", REFUSED_WRITE)
    assert statuses == {"r": "failed", "r-sub-call-0-0": "failed", "r-sub-call-0-1": "failed"}
    assert [ref.status for ref in refs] == ["failed", "failed"]
    assert stream.status == "failed"
    assert [chunk.sequence for chunk in chunks] == list(range(1, len(chunks) + 1))
    last = chunks[-1]
    assert isinstance(last, ErrorChunk)
    assert (last.agent_id, last.error) == ("r", REFUSED_WRITE)
    assert calls["model:slow"] == 1
