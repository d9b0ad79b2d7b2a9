"""SIGKILL of a server whose tree has non-blocking persistent children (the `curator` of
`tests.e2e.agents`): the children finish under the server that takes the tree over, and each
child's completion notice reaches the curator exactly once, also when the kill falls in the turn
that reads the notices."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.protocol import ToolEndChunk, ToolStartChunk
from tests.e2e.agents import SCOUTED
from tests.e2e.conftest import Cluster, loopback_client, read_stream, wait_status
from tests.support import check_invariants, check_tool_calls

pytestmark = pytest.mark.slow

ROOT = "c1"
SCOUTS = [f"{ROOT}-agent-scout-{n}" for n in (1, 2)]
FAST_TAKEOVER = {"LEASE_SECONDS": "2", "TAKEOVER_INTERVAL": "0.25"}


async def start(url: str) -> None:
    async with loopback_client(url) as client:
        answer = await client.post(
            "/start", json={"agentType": "curator", "message": "go", "sessionId": ROOT}
        )
    assert answer.status_code == 201, answer.text


async def logged(cluster: Cluster, *calls: tuple[str, str], timeout: float = 20.0) -> None:
    """Wait until every (session, turn) model call of `calls` is in the call log."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        made = {(c["session"], c["key"]) for c in cluster.calls() if c["kind"] == "model"}
        if set(calls) <= made:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"never called: {calls}\n{cluster.logs()}")


async def report(url: str) -> dict[str, Any]:
    """Ask for the curator's report and wait for it."""
    async with loopback_client(url) as client:
        answer = await client.post(f"/resume/{ROOT}", json={"message": "report"})
    assert answer.status_code == 200, answer.text
    return await wait_status(url, ROOT, "completed", timeout=30)


async def conversation(url: str) -> list[dict[str, Any]]:
    async with loopback_client(url) as client:
        answer = await client.get(f"/sessions/{ROOT}/messages", params={"limit": 100})
    assert answer.status_code == 200, answer.text
    return [item["message"] for item in answer.json()["messages"]]


def check_report(status: dict[str, Any], messages: list[dict[str, Any]]) -> None:
    """One notice per scout, in the conversation and in the report, each exactly once."""
    notices = [m["content"] for m in messages if m["role"] == "system"]
    assert len(notices) == 2, notices
    for scout, topic in zip(SCOUTS, SCOUTED, strict=True):
        (notice,) = [n for n in notices if scout in n]
        assert "completed" in notice
        assert topic in notice
        assert status["output"].count(scout) == 1, status["output"]


async def test_notices_reach_the_parent_once_when_the_reading_turn_is_killed(
    cluster: Cluster,
) -> None:
    first = await cluster.start("a", **FAST_TAKEOVER)
    await start(first.url)
    ran = await read_stream(first.url, ROOT)
    assert ran.end == {"status": "completed"}, cluster.logs()
    async with loopback_client(first.url) as client:
        answer = await client.post(f"/resume/{ROOT}", json={"message": "report"})
    assert answer.status_code == 200, answer.text
    # The curator reads the notices, then is killed while its model writes the report.
    await logged(cluster, (ROOT, "2"))
    await first.kill()

    heir = await cluster.start("b", **FAST_TAKEOVER)
    status = await wait_status(heir.url, ROOT, "completed", timeout=30)
    check_report(status, await conversation(heir.url))
    whole = await read_stream(heir.url, ROOT)
    assert whole.end == {"status": "completed"}
    check_invariants(whole.chunks)
    check_tool_calls(whole.chunks, "completed")
    made = [(c["session"], c["key"]) for c in cluster.calls() if c["kind"] == "model"]
    # The report in flight at the kill was written again; nothing else was.
    assert made.count((ROOT, "2")) == 2
    assert all(made.count(call) == 1 for call in made if call != (ROOT, "2"))


async def test_children_running_at_a_kill_finish_under_the_heir_and_are_heard_of_once(
    cluster: Cluster,
) -> None:
    first = await cluster.start("a", **FAST_TAKEOVER)
    await start(first.url)
    # Both scouts are at their first model call (0.6 s each) when the server dies.
    await logged(cluster, *[(scout, "0") for scout in SCOUTS])
    await first.kill()

    heir = await cluster.start("b", **FAST_TAKEOVER)
    ran = await read_stream(heir.url, ROOT, timeout=30)
    assert ran.end == {"status": "completed"}, cluster.logs()
    for scout, topic in zip(SCOUTS, SCOUTED, strict=True):
        body = await wait_status(heir.url, scout, "completed")
        assert body["output"] == {"note": topic}
    status = await report(heir.url)
    check_report(status, await conversation(heir.url))
    whole = await read_stream(heir.url, ROOT)
    check_invariants(whole.chunks)
    # A call whose result the kill took is told again by the heir (as in test_crash.py): its
    # first tool_start may still be open then. Every call ends.
    started = {(c.agent_id, c.tool_call_id) for c in whole.chunks if isinstance(c, ToolStartChunk)}
    ended = {(c.agent_id, c.tool_call_id) for c in whole.chunks if isinstance(c, ToolEndChunk)}
    assert started == ended
