"""Tool-call ids from models in the wild: reused across responses and within one, or missing.

Many OpenAI-compatible servers number calls `call_0`, `call_1`, ... afresh in every response.
The runtime keeps the model's ids in what it sends back to the model, but every id it derives
(child sessions, chunks, resume answers) is unique within the session.
"""

from __future__ import annotations

from typing import Any

from app import AgentRuntime, create_sub_agent_tool, define_agent
from app.ids import assign_call_ids
from app.models import FunctionModel, ModelRequest, ModelResponse, ToolCall
from app.models.openai import chat_messages
from app.protocol import AssistantMessage, ToolMessage, UserMessage
from app.store import StateStore
from tests.runtime.agents import Calls, Task, add_tool, adder, registry
from tests.support import check_invariants


def reusing_model(calls: Calls) -> FunctionModel:
    """Calls the adder sub-agent as `call_0` in two responses, then `add` twice as `call_0` in one
    response, then answers with what it got."""

    def model(request: ModelRequest) -> ModelResponse:
        calls["model:boss"] += 1
        turn = sum(isinstance(m, AssistantMessage) for m in request.messages)
        if turn in (0, 1):
            task = {"task": f"t{turn}", "a": turn, "b": 10}
            return ModelResponse(tool_calls=[ToolCall("subagent__adder", task, id="call_0")])
        if turn == 2:
            return ModelResponse(
                tool_calls=[
                    ToolCall("add", {"a": 1, "b": 1}, id="call_0"),
                    ToolCall("add", {"a": 2, "b": 2}, id="call_0"),
                ]
            )
        results = [m.result for m in request.messages if isinstance(m, ToolMessage)]
        return ModelResponse(text=f"got {results}")

    return FunctionModel(model)


async def test_reused_call_ids_never_merge_children_or_calls(store: StateStore) -> None:
    calls = Calls()
    boss = define_agent(
        "boss",
        tools=[create_sub_agent_tool(adder(calls), Task), add_tool(calls)],
        model=reusing_model(calls),
    )
    async with AgentRuntime(registry(boss), store=store) as runtime:
        handle = await runtime.execute("boss", "go", session_id="b1")
        result = await handle.result()
        chunks = [chunk async for chunk in runtime.follow("b1")]
        status = await runtime.status("b1")
        messages = await store.load_messages("b1")

    assert (result.status, result.output) == (
        "completed",
        "got [{'total': 10}, {'total': 11}, 2, 4]",
    )
    check_invariants(chunks)
    assert [(ref.sub_session_id, ref.parent_tool_call_id) for ref in status.sub_sessions] == [
        ("b1-sub-call_0", "call_0"),
        ("b1-sub-call-1-0", "call-1-0"),
    ]
    assistant_calls = [
        (call.id, call.original_id)
        for m in messages
        if isinstance(m, AssistantMessage)
        for call in m.tool_calls
    ]
    assert assistant_calls == [
        ("call_0", None),
        ("call-1-0", "call_0"),
        ("call-2-0", "call_0"),
        ("call-2-1", "call_0"),
    ]
    assert calls == Calls({"model:boss": 4, "model:adder": 4, "add": 4})


def test_assigned_ids_keep_new_plain_ids_and_replace_the_rest() -> None:
    used = {"a", "call-3-1"}
    ids = assign_call_ids(["a", None, "b", "b", "bad id", "x" * 65, "call-3-1"], used, 3)
    assert ids == [
        "call-3-0",
        "call-3-1.1",
        "b",
        "call-3-3",
        "call-3-4",
        "call-3-5",
        "call-3-6",
    ]
    assert used >= set(ids)
    assert assign_call_ids(["call-3-0"], {"call-3-0"}, 3) == ["call-3-0.1"]


def test_the_model_is_sent_back_its_own_ids() -> None:
    messages: Any = (
        UserMessage(content="go"),
        AssistantMessage(
            tool_calls=(
                ToolCall("add", {"a": 1, "b": 1}, id="call-2-0", original_id="call_0"),
                ToolCall("add", {"a": 2, "b": 2}, id="call-2-1", original_id="call_0"),
                ToolCall("add", {"a": 3, "b": 3}, id="mine"),
            )
        ),
        ToolMessage(tool_call_id="call-2-0", tool_name="add", result=2),
        ToolMessage(tool_call_id="call-2-1", tool_name="add", result=4),
        ToolMessage(tool_call_id="mine", tool_name="add", result=6),
    )
    request = ModelRequest(
        session_id="s", agent_type="a", system_prompt="", messages=messages, tools=(), step=1
    )
    sent = chat_messages(request)
    assert [call["id"] for call in sent[1]["tool_calls"]] == ["call_0", "call_0", "mine"]  # type: ignore[typeddict-item]
    assert [m["tool_call_id"] for m in sent[2:]] == ["call_0", "call_0", "mine"]  # type: ignore[typeddict-item]
