"""Listing sessions, re-reading a conversation, and `/status` with the whole tree and its usage."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from pydantic import BaseModel

from app import AgentRegistry, create_sub_agent_tool, define_agent
from app.models import ModelResponse, ScriptedModel, ToolCall
from app.models.base import Usage
from app.settings import Settings
from tests.api.conftest import Server, serve
from tests.databases import database_url
from tests.runtime.agents import Calls


class Ask(BaseModel):
    message: str


class Answer(BaseModel):
    answer: str


def nested_registry() -> AgentRegistry:
    """boss -> mid (x2, in parallel) -> leaf: every model call reports its usage."""
    leaf = define_agent(
        "leaf",
        output_schema=Answer,
        model=ScriptedModel(
            [
                ModelResponse(
                    tool_calls=[ToolCall("__finish__", {"answer": "leaf"})],
                    usage=Usage(3, 1),
                )
            ]
        ),
    )
    mid = define_agent(
        "mid",
        tools=[create_sub_agent_tool(leaf, Ask)],
        output_schema=Answer,
        model=ScriptedModel(
            [
                ModelResponse(
                    tool_calls=[ToolCall("subagent__leaf", {"message": "go"}, id="l")],
                    usage=Usage(20, 2),
                ),
                ModelResponse(
                    tool_calls=[ToolCall("__finish__", {"answer": "mid"})], usage=Usage(20, 2)
                ),
            ]
        ),
    )

    def turn(first: str, second: str) -> list[ModelResponse]:
        calls = [
            ToolCall("subagent__mid", {"message": "one"}, id=first),
            ToolCall("subagent__mid", {"message": "two"}, id=second),
        ]
        return [
            ModelResponse(text="asking", tool_calls=calls, usage=Usage(100, 10)),
            ModelResponse(text="done", usage=Usage(100, 10)),
        ]

    # Two turns: a session continued with a new message plays the second.
    boss = define_agent(
        "boss",
        tools=[create_sub_agent_tool(mid, Ask)],
        model=ScriptedModel(turn("m1", "m2") + turn("m3", "m4")),
    )
    return AgentRegistry([boss])


@pytest.fixture(params=["sqlite", "postgres"])
async def nested(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Server]:
    calls = Calls()
    async with database_url(request.param, tmp_path) as url:
        settings = Settings(database_url=url, stream_heartbeat=0.2, stream_poll=0.2)
        async with serve(nested_registry(), calls, settings) as running:
            yield running


async def finish(client: httpx.AsyncClient, session_id: str) -> None:
    for _ in range(500):
        if (await client.get(f"/status/{session_id}")).json()["status"] != "running":
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{session_id} did not stop")


async def test_the_whole_tree_and_its_usage(nested: Server) -> None:
    async with httpx.AsyncClient(base_url=nested.url, timeout=10) as client:
        await client.post("/start", json={"agentType": "boss", "message": "hi", "sessionId": "t"})
        await finish(client, "t")
        flat = (await client.get("/status/t")).json()
        whole = (await client.get("/status/t", params={"tree": "true"})).json()
        shallow = (await client.get("/status/t", params={"tree": "true", "depth": 1})).json()
        child = (await client.get("/status/t-sub-m1", params={"tree": "true"})).json()
        bad = await client.get("/status/t", params={"tree": "true", "depth": -1})

    assert "tree" not in flat
    assert {key: value for key, value in whole.items() if key not in ("tree", "treeUsage")} == flat

    def shape(node: dict[str, object]) -> object:
        children = node["children"]
        assert isinstance(children, list)
        return (node["sessionId"], node["status"], [shape(c) for c in children])

    assert shape(whole["tree"]) == (
        "t",
        "completed",
        [
            ("t-sub-m1", "completed", [("t-sub-m1-sub-l", "completed", [])]),
            ("t-sub-m2", "completed", [("t-sub-m2-sub-l", "completed", [])]),
        ],
    )
    assert whole["treeUsage"] == {"inputTokens": 200 + 2 * 40 + 2 * 3, "outputTokens": 30}
    assert whole["usage"] == {"inputTokens": 200, "outputTokens": 20}
    first = whole["tree"]["children"][0]
    assert (first["parentToolCallId"], first["mode"], first["agentType"]) == (
        "m1",
        "ephemeral",
        "mid",
    )
    assert first["output"] == {"answer": "mid"}
    assert first["usage"] == {"inputTokens": 40, "outputTokens": 4}
    # A depth limit keeps the usage of the whole tree and says what it left out.
    assert shape(shallow["tree"]) == (
        "t",
        "completed",
        [("t-sub-m1", "completed", []), ("t-sub-m2", "completed", [])],
    )
    assert [c["truncated"] for c in shallow["tree"]["children"]] == [True, True]
    assert shallow["treeUsage"] == whole["treeUsage"]
    # A child's tree is its own subtree.
    assert shape(child["tree"]) == ("t-sub-m1", "completed", [("t-sub-m1-sub-l", "completed", [])])
    assert child["treeUsage"] == {"inputTokens": 43, "outputTokens": 5}
    assert bad.status_code == 422


async def test_sessions_are_listed_and_conversations_reread(nested: Server) -> None:
    async with httpx.AsyncClient(base_url=nested.url, timeout=10) as client:
        for index in range(5):
            body = {"agentType": "boss", "message": f"hi {index}", "sessionId": f"l{index}"}
            assert (await client.post("/start", json=body)).status_code == 201
            await finish(client, f"l{index}")
        await client.post("/resume/l1", json={"message": "and again"})
        await finish(client, "l1")
        pages = []
        cursor = None
        while True:
            params: dict[str, object] = {"limit": 2}
            if cursor is not None:
                params["cursor"] = cursor
            page = (await client.get("/sessions", params=params)).json()
            pages.append([s["sessionId"] for s in page["sessions"]])
            cursor = page["nextCursor"]
            if cursor is None:
                break
        completed = (await client.get("/sessions", params={"status": ["completed"]})).json()
        nobody = (await client.get("/sessions", params={"agentType": "mid"})).json()
        running = (await client.get("/sessions", params={"status": ["running", "failed"]})).json()
        conversation = (await client.get("/sessions/l1/messages")).json()
        second = (
            await client.get("/sessions/l1/messages", params={"offset": 2, "limit": 2})
        ).json()
        child = (await client.get("/sessions/l1-sub-m1/messages")).json()
        # Positions are 32-bit in the store: the last one is a page past the end, not an error.
        last = await client.get("/sessions/l1/messages", params={"offset": 2**31 - 1})
        past = await client.get("/sessions/l1/messages", params={"offset": 2**31})
        missing = await client.get("/sessions/nope/messages")
        bad_cursor = await client.get("/sessions", params={"cursor": "bm90IGpzb24"})
        # Any cursor of the documented form is a position: before every session, or after.
        before_all = await client.get("/sessions", params={"cursor": "999999999999999_z"})
        after_all = await client.get("/sessions", params={"cursor": "1_a"})
        bad_status = await client.get("/sessions", params={"status": "sleeping"})

    assert pages == [["l4", "l3"], ["l2", "l1"], ["l0"]]
    listed = completed["sessions"]
    assert [s["sessionId"] for s in listed] == ["l4", "l3", "l2", "l1", "l0"]
    assert set(listed[0]) == {
        "sessionId",
        "agentType",
        "status",
        "createdAt",
        "updatedAt",
        "stepCount",
        "streamId",
        "parentSessionId",
        "error",
        "usage",
    }
    assert listed[0]["usage"] == {"inputTokens": 200, "outputTokens": 20}
    assert nobody == {"sessions": [], "nextCursor": None}
    assert running == {"sessions": [], "nextCursor": None}
    messages = conversation["messages"]
    assert [(m["index"], m["message"]["role"]) for m in messages] == [
        (0, "user"),
        (1, "assistant"),
        (2, "tool"),
        (3, "tool"),
        (4, "assistant"),
        (5, "user"),
        (6, "assistant"),
        (7, "tool"),
        (8, "tool"),
        (9, "assistant"),
    ]
    assert messages[0]["message"] == {"role": "user", "content": "hi 1"}
    assert messages[5]["message"] == {"role": "user", "content": "and again"}
    assert messages[1]["message"]["toolCalls"][0]["name"] == "subagent__mid"
    assert conversation["nextOffset"] is None
    assert [m["index"] for m in second["messages"]] == [2, 3]
    assert second["nextOffset"] == 4
    assert child["messages"][0]["message"] == {"role": "user", "content": "one"}
    assert missing.status_code == 404
    assert last.json() == {"sessionId": "l1", "messages": [], "nextOffset": None}
    assert past.status_code == 422
    assert (bad_cursor.status_code, bad_cursor.json()["error"]["code"]) == (422, "invalid_request")
    assert [s["sessionId"] for s in before_all.json()["sessions"]] == ["l4", "l3", "l2", "l1", "l0"]
    assert after_all.json() == {"sessions": [], "nextCursor": None}
    assert bad_status.status_code == 422
