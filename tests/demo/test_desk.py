"""The briefing desk over HTTP: one background analyst per topic, the parent parked in
`subagent_wait` until a batched notice wakes it, summaries read, a briefing written."""

from __future__ import annotations

from pathlib import Path

from app.demo.catalogue import LIBRARY
from app.demo.desk_brains import DESK_HELP
from app.protocol import Chunk, ToolStartChunk
from tests.demo.http import demo_client, follow, start, status
from tests.support import check_invariants, check_tool_calls


async def test_the_desk_launches_waits_and_reads_the_summaries(tmp_path: Path) -> None:
    chunks: list[Chunk] = []
    async with demo_client(tmp_path) as client:
        await start(client, "briefing-desk", "desk-1", "Research: solar power and batteries")
        assert await follow(client, "desk-1", chunks) == "completed"
        desk = await status(client, "desk-1")
        analyst = await status(client, "desk-1-task-call-0-0")
        messages = (await client.get("/sessions/desk-1/messages")).json()["messages"]

    assert desk["output"] == (
        "Your briefing:\n"
        f"- solar power: {LIBRARY['solar power'][1][0]}\n"
        f"- batteries: {LIBRARY['batteries'][1][0]}"
    )
    assert [(r["subSessionId"], r["mode"], r["status"]) for r in desk["subSessions"]] == [
        ("desk-1-task-call-0-0", "background", "completed"),
        ("desk-1-task-call-0-1", "background", "completed"),
    ]
    assert (analyst["agentType"], analyst["status"]) == ("analyst", "completed")
    assert "<summary>solar power: " in analyst["output"]
    notices = [m["message"]["content"] for m in messages if m["message"]["role"] == "system"]
    told = [line.split()[1] for notice in notices for line in notice.splitlines()[1:]]
    assert sorted(told) == ["desk-1-task-call-0-0", "desk-1-task-call-0-1"]
    tools = [
        c.tool_name for c in chunks if isinstance(c, ToolStartChunk) and c.agent_id == "desk-1"
    ]
    assert tools[:3] == ["subagent", "subagent", "subagent_wait"]
    assert "subagent_result" in tools
    check_invariants(chunks)
    check_tool_calls(chunks, "completed")


async def test_the_desk_explains_itself_without_topics(tmp_path: Path) -> None:
    async with demo_client(tmp_path) as client:
        await start(client, "briefing-desk", "desk-2", "hello")
        assert await follow(client, "desk-2", []) == "completed"
        desk = await status(client, "desk-2")
    assert desk["output"] == DESK_HELP
