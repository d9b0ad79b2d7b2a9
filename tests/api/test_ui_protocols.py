"""The AI SDK UI message stream and AG-UI events, checked by their official clients in Node
(`ai`, `@ag-ui/client`, installed from tests/js/package-lock.json by `make test`): a tree run
renders, a cut connection resumes without repeating anything, and pending calls are answered
through each protocol's own mechanism."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from app import AgentRegistry, create_sub_agent_tool, define_agent
from app.agents import AgentConfig
from app.errors import TransientModelError
from app.models import (
    FunctionModel,
    Model,
    ModelEvent,
    ModelRequest,
    ModelResponse,
    RetryingModel,
    TextDelta,
    ToolCall,
)
from app.protocol import ToolMessage
from app.settings import Settings
from tests.api.conftest import Server, read_stream, serve
from tests.runtime.agents import Calls
from tests.runtime.test_client_tools import client_agent

JS = Path(__file__).resolve().parents[1] / "js"


class Ask(BaseModel):
    message: str


class Answer(BaseModel):
    answer: str


def tree(latency: float) -> AgentConfig:
    """boss: says something, asks two `mid`s in parallel (each asks a `leaf`), then reports."""

    def leaf_model(request: ModelRequest) -> ModelResponse:
        return ModelResponse(
            text="leaf thinking. ", tool_calls=[ToolCall("__finish__", {"answer": "leaf"})]
        )

    leaf = define_agent(
        "leaf", output_schema=Answer, model=FunctionModel(leaf_model, latency=latency)
    )

    def mid_model(request: ModelRequest) -> ModelResponse:
        if not any(isinstance(m, ToolMessage) for m in request.messages):
            return ModelResponse(
                text="mid asks the leaf. ",
                tool_calls=[ToolCall("subagent__leaf", {"message": "go"}, id="l")],
            )
        return ModelResponse(tool_calls=[ToolCall("__finish__", {"answer": "mid done"})])

    mid = define_agent(
        "mid",
        tools=[create_sub_agent_tool(leaf, Ask)],
        output_schema=Answer,
        model=FunctionModel(mid_model, latency=latency),
    )

    def boss_model(request: ModelRequest) -> ModelResponse:
        if not any(isinstance(m, ToolMessage) for m in request.messages):
            return ModelResponse(
                text="Let me ask two helpers about it.",
                tool_calls=[
                    ToolCall("subagent__mid", {"message": "one"}, id="m1"),
                    ToolCall("subagent__mid", {"message": "two"}, id="m2"),
                ],
            )
        return ModelResponse(text="Both helpers are done: all is well.")

    return define_agent(
        "boss",
        tools=[create_sub_agent_tool(mid, Ask)],
        model=FunctionModel(boss_model, latency=latency),
    )


def retrier() -> AgentConfig:
    """retrier: its model's first attempt streams text, which reaches the stream, then fails;
    the retry answers in full."""

    attempts: Counter[str] = Counter()

    class Flaky(Model):
        async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
            attempts[request.session_id] += 1
            yield TextDelta("A first try")
            if attempts[request.session_id] == 1:
                await asyncio.sleep(0.3)  # the stream's flush takes the text
                raise TransientModelError("connection lost")
            yield TextDelta(" that works.")

    return define_agent("retrier", model=RetryingModel(Flaky(), base_delay=0.01))


def node_or_skip() -> str:
    node = shutil.which("node")
    if node is None or not (JS / "node_modules").is_dir():
        reason = "Node.js or tests/js/node_modules is missing (`make test` runs npm ci)"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI requires the protocol clients")
        pytest.skip(reason)
    return node


async def run_node(script: str, *args: str, timeout: float = 60) -> dict[str, Any]:
    """Run a script of tests/js with `args` and read the JSON it prints."""
    process = await asyncio.create_subprocess_exec(
        node_or_skip(),
        str(JS / script),
        *args,
        cwd=JS,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout)
    assert process.returncode == 0, err.decode()[-3000:]
    result: dict[str, Any] = json.loads(out)
    return result


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    calls = Calls()
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'ui.db'}",
        stream_heartbeat=0.5,
        stream_poll=0.2,
    )
    registry = AgentRegistry([tree(latency=0.3), client_agent(Counter()), retrier()])
    async with serve(registry, calls, settings) as running:
        yield running


def texts(message: dict[str, Any]) -> str:
    return "".join(part["text"] for part in message["parts"] if part["type"] == "text")


def agents(message: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["id"]: p["data"] for p in message["parts"] if p["type"] == "data-agent"}


def tools(message: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [
        (p["toolName"], p["toolCallId"], p["state"])
        for p in message["parts"]
        if p["type"] == "tool"
    ]


EXPECTED_TEXT = "Let me ask two helpers about it.Both helpers are done: all is well."


def check_tree_message(message: dict[str, Any], chat: str) -> None:
    assert message["role"] == "assistant"
    assert texts(message) == EXPECTED_TEXT
    assert tools(message) == [
        ("subagent__mid", "m1", "output-available"),
        ("subagent__mid", "m2", "output-available"),
    ]
    found = agents(message)
    assert sorted(found) == sorted(
        [f"{chat}-sub-m1", f"{chat}-sub-m2", f"{chat}-sub-m1-sub-l", f"{chat}-sub-m2-sub-l"]
    )
    leaf = found[f"{chat}-sub-m1-sub-l"]
    assert (leaf["parentSessionId"], leaf["status"], leaf["text"]) == (
        f"{chat}-sub-m1",
        "completed",
        "leaf thinking. ",
    )
    mid = found[f"{chat}-sub-m1"]
    assert mid["text"] == "mid asks the leaf. "
    assert mid["output"] == {"answer": "mid done"}
    assert [(t["toolName"], t["state"]) for t in mid["tools"]] == [
        ("subagent__leaf", "output-available")
    ]


async def test_use_chat_renders_a_tree_run(server: Server) -> None:
    result = await run_node("ai_sdk.mjs", server.url, "chat", "c1")
    assert result["errors"] == []
    assert result["status"] == "ready"
    user, assistant = result["messages"]
    assert user["parts"] == [{"type": "text", "text": "hello"}]
    check_tree_message(assistant, "c1")
    assert [p["type"] for p in assistant["parts"] if p["type"] == "data-output"] == []


async def test_use_chat_hears_of_a_step_that_runs_again(server: Server) -> None:
    result = await run_node("ai_sdk.mjs", server.url, "chat", "c-redo", "retrier")
    assert result["errors"] == []
    _, assistant = result["messages"]
    # useChat keeps the void attempt's text part; the data-redo part after it says to drop it.
    assert assistant["parts"] == [
        {"type": "text", "text": "A first try"},
        {
            "type": "data-redo",
            "id": "c-redo:1",
            "data": {
                "sessionId": "c-redo",
                "step": 1,
                "reason": "model_retry",
                "textIds": ["c-redo:1"],
            },
        },
        {"type": "text", "text": "A first try that works."},
    ]


async def test_ag_ui_hears_of_a_step_that_runs_again(server: Server) -> None:
    result = await run_node("ag_ui.mjs", server.url, "run", "g-redo", "retrier")
    (run,) = result["runs"]
    assert run["ok"], run
    assert run["finished"]["result"] == "A first try that works."
    assert run["types"][2:9] == [
        "STEP_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "STEP_FINISHED",
        "CUSTOM",
        "STEP_STARTED",
    ]
    assert [m["content"] for m in result["messages"] if m["role"] == "assistant"] == [
        "A first try",
        "A first try that works.",
    ]


async def test_use_chat_resumes_a_cut_turn_without_repeats(server: Server) -> None:
    result = await run_node("ai_sdk.mjs", server.url, "cut-resume", "c2")
    cut = result["afterSend"]
    assert cut["status"] == "error", "the first response was not cut"
    assert len(texts(cut["messages"][-1])) < len(EXPECTED_TEXT)
    assert result["status"] == "ready"
    user, assistant = result["messages"]
    assert user["parts"] == [{"type": "text", "text": "hello"}]
    check_tree_message(assistant, "c2")
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        ended = await client.get("/ai-sdk/chat/c2/stream")
        whole = await read_stream(client, "c2")
    assert ended.status_code == 204
    assert whole.end == {"status": "completed"}


async def test_use_chat_answers_a_client_tool_and_an_approval(server: Server) -> None:
    result = await run_node("ai_sdk.mjs", server.url, "client-tools", "c3", "shopper")
    paused = result["afterSend"]["messages"][-1]
    assert tools(paused) == [
        ("ask_user", "q", "input-available"),
        ("pay", "p", "approval-requested"),
    ]
    assert result["errors"] == []
    assistant = result["messages"][-1]
    assert tools(assistant) == [
        ("ask_user", "q", "output-available"),
        ("pay", "p", "output-available"),
    ]
    assert texts(assistant) == "city=Oslo pay=paid 5"
    assert len(result["messages"]) == 2


async def test_the_views_resume_by_sequence(server: Server) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        await client.post("/start", json={"agentType": "boss", "message": "hi", "sessionId": "v"})
        whole = await read_stream(client, "v")
        views = {}
        for name in ("ai-sdk", "ag-ui"):
            full = (await client.get(f"/stream/v/{name}")).text
            parts = []
            for after in (0, 5, 17):
                answer = await client.get(f"/stream/v/{name}", params={"fromSequence": after})
                assert answer.status_code == 200
                parts.append(answer.text)
            views[name] = (full, parts)
        missing = await client.get("/stream/nope/ag-ui")
    assert whole.end == {"status": "completed"}
    ai_full, _ = views["ai-sdk"]
    assert ai_full.endswith("data: [DONE]\n\n")
    events = [json.loads(line[6:]) for line in ai_full.split("\n\n") if line.startswith("data: {")]
    assert events[0] == {"type": "start", "messageId": "v-0"}
    assert events[-1] == {"type": "finish", "finishReason": "stop"}
    ag_full, _ = views["ag-ui"]
    ag_events = [
        json.loads(line[6:]) for line in ag_full.split("\n\n") if line.startswith("data: ")
    ]
    assert ag_events[0]["type"] == "RUN_STARTED"
    assert ag_events[-1]["type"] == "RUN_FINISHED"
    assert missing.status_code == 404


def ag_texts(result: dict[str, Any], subagent: str | None = None) -> str:
    return "".join(
        m["content"]
        for m in result["messages"]
        if m["role"] == "assistant" and m["subagentRunId"] == subagent and m["content"]
    )


def check_ag_ui_tree(result: dict[str, Any], thread: str) -> None:
    assert ag_texts(result) == EXPECTED_TEXT
    assert ag_texts(result, f"{thread}-sub-m1") == "mid asks the leaf. "
    assert ag_texts(result, f"{thread}-sub-m2-sub-l") == "leaf thinking. "
    assert sorted(set(map(tuple, result["subagents"]))) == sorted(
        [
            (f"{thread}-sub-m1", None, "m1"),
            (f"{thread}-sub-m2", None, "m2"),
            (f"{thread}-sub-m1-sub-l", f"{thread}-sub-m1", f"{thread}-sub-m1/l"),
            (f"{thread}-sub-m2-sub-l", f"{thread}-sub-m2", f"{thread}-sub-m2/l"),
        ]
    )
    calls = [c for m in result["messages"] for c in m["toolCalls"]]
    assert [c[:2] for c in calls if not c[0].startswith(thread)] == [
        ["m1", "subagent__mid"],
        ["m2", "subagent__mid"],
    ]
    results = [m for m in result["messages"] if m["role"] == "tool"]
    assert len(results) == len({m["id"] for m in results}) == 4
    assert result["state"]["agents"][f"{thread}-sub-m2-sub-l"] == {
        "agentType": "leaf",
        "parentId": f"{thread}-sub-m2",
        "status": "completed",
    }
    ids = [m["id"] for m in result["messages"]]
    assert len(ids) == len(set(ids)), "a message was repeated"


async def test_ag_ui_renders_a_tree_run(server: Server) -> None:
    result = await run_node("ag_ui.mjs", server.url, "run", "g1")
    (run,) = result["runs"]
    assert run["ok"], run
    assert run["types"][0] == "RUN_STARTED"
    assert run["finished"]["outcome"] == {"type": "success"}
    assert run["finished"]["result"] == EXPECTED_TEXT.split(".", 1)[1]
    assert {"STEP_STARTED", "STEP_FINISHED", "STATE_DELTA", "SUBAGENT_FINISHED"} <= set(
        run["types"]
    )
    check_ag_ui_tree(result, "g1")


async def test_ag_ui_resumes_a_cut_run_by_sequence(server: Server) -> None:
    result = await run_node("ag_ui.mjs", server.url, "cut-resume", "g2")
    cut, resumed = result["runs"]
    assert not cut["ok"]
    assert cut["sequence"] > 0
    assert resumed["ok"], resumed
    assert resumed["finished"]["outcome"] == {"type": "success"}
    check_ag_ui_tree(result, "g2")


async def test_ag_ui_answers_interrupts_with_resume_entries(server: Server) -> None:
    result = await run_node("ag_ui.mjs", server.url, "interrupts", "g3", "shopper")
    paused, done = result["runs"]
    assert (paused["ok"], done["ok"]) == (True, True), result
    assert paused["finished"]["outcome"]["type"] == "interrupt"
    assert [(i["id"], i["reason"]) for i in paused["finished"]["outcome"]["interrupts"]] == [
        ("q", "client_tool"),
        ("p", "approval"),
    ]
    assert done["finished"]["outcome"] == {"type": "success"}
    assert done["finished"]["result"] == "city=Oslo pay=paid 5"


def chat(chat_id: str, agent_type: str, *texts: str) -> dict[str, Any]:
    """A `POST /ai-sdk/chat` body whose user messages say `texts`."""
    messages = [
        {"id": f"u{i}", "role": "user", "parts": [{"type": "text", "text": said}]}
        for i, said in enumerate(texts)
    ]
    return {"id": chat_id, "agentType": agent_type, "messages": messages}


def thread(thread_id: str, *texts: str, **more: Any) -> dict[str, Any]:
    """A `POST /ag-ui/{agentType}` body whose user messages say `texts`."""
    messages = [{"id": f"u{i}", "role": "user", "content": said} for i, said in enumerate(texts)]
    return {"threadId": thread_id, "runId": "run", "messages": messages, **more}


async def test_what_a_session_does_not_allow_is_a_404_or_a_409(server: Server) -> None:
    """A schema-valid turn is refused only for the state of the session it names (404, 409),
    like `/resume`, and refusing it changes nothing."""
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        await client.post("/start", json={"agentType": "boss", "message": "hi", "sessionId": "d"})
        assert (await read_stream(client, "d")).end == {"status": "completed"}
        answers = {
            "new chat, no message": await client.post("/ai-sdk/chat", json=chat("n", "boss")),
            "new thread, no message": await client.post("/ag-ui/boss", json=thread("n")),
            "follow a new thread": await client.post(
                "/ag-ui/boss", json=thread("n", "hi", forwardedProps={"fromSequence": 0})
            ),
            "unknown agent": await client.post("/ai-sdk/chat", json=chat("n", "nobody", "hi")),
            "another agent": await client.post("/ai-sdk/chat", json=chat("d", "shopper", "hi")),
            "another agent's thread": await client.post("/ag-ui/shopper", json=thread("d", "hi")),
            "finished, no message": await client.post("/ai-sdk/chat", json=chat("d", "boss")),
            "thread finished, no message": await client.post("/ag-ui/boss", json=thread("d")),
            "a sub-agent": await client.post("/ai-sdk/chat", json=chat("d-sub-m1", "mid", "hi")),
        }
        missing = await client.get("/status/n")
    codes = {
        name: (answer.status_code, answer.json()["error"]["code"])
        for name, answer in answers.items()
    }
    assert codes == {
        "new chat, no message": (404, "session_not_found"),
        "new thread, no message": (404, "session_not_found"),
        "follow a new thread": (404, "session_not_found"),
        "unknown agent": (404, "agent_not_found"),
        "another agent": (409, "agent_mismatch"),
        "another agent's thread": (409, "agent_mismatch"),
        "finished, no message": (409, "session_not_resumable"),
        "thread finished, no message": (409, "session_not_resumable"),
        "a sub-agent": (409, "session_not_resumable"),
    }
    assert missing.status_code == 404


async def test_chat_bodies_are_checked_as_the_document_says(server: Server) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        no_agent = {k: v for k, v in chat("x", "boss", "hi").items() if k != "agentType"}
        snake = {**no_agent, "agent_type": "boss"}
        refused = {
            "no agentType": await client.post("/ai-sdk/chat", json=no_agent),
            "snake_case agent_type": await client.post("/ai-sdk/chat", json=snake),
            "a bad chat id": await client.post("/ai-sdk/chat", json=chat("a b", "boss", "hi")),
        }
        for name, value in {"true": True, "a string": "3", "negative": -1, "2^63": 2**63}.items():
            body = thread("x", "hi", forwardedProps={"fromSequence": value})
            refused[f"fromSequence {name}"] = await client.post("/ag-ui/boss", json=body)
        # Lists are as long as the body limit (1 MiB) lets them be.
        long, too_long = chat("y", "boss", *["hi"] * 10_001), chat("z", "boss", *["hi"] * 20_000)
        assert len(json.dumps(long)) < 2**20 < len(json.dumps(too_long))
        accepted = await client.post("/ai-sdk/chat", json=long)
        large = await client.post("/ai-sdk/chat", json=too_long)
        started = await client.get("/sessions")
    assert {name: answer.status_code for name, answer in refused.items()} == dict.fromkeys(
        refused, 422
    )
    assert accepted.status_code == 200
    assert accepted.text.endswith("data: [DONE]\n\n")
    assert (large.status_code, large.json()["error"]["code"]) == (413, "request_too_large")
    assert [s["sessionId"] for s in started.json()["sessions"]] == ["y"]
