"""Background delegation over HTTP on every store, with a real server on loopback: the cap and
the queue positions in `/status`, FIFO starts, a cancelled queued session that never starts,
`subagent_wait` parking its parent, and the stream that frames the children and ends with them.

The workers are held at a `Gate` (they run in this process's loop, the server's too), so what
`/status` shows is looked at while nothing can move."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from app import AgentRegistry, Delegation, define_agent
from app.agents import AgentConfig
from app.models import FunctionModel, ModelRequest, ModelResponse, ToolCall
from app.protocol import (
    Chunk,
    SubagentEndChunk,
    SubagentStartChunk,
    SystemMessage,
    UserMessage,
)
from app.settings import Settings
from tests.api.conftest import read_stream, serve
from tests.databases import database_url
from tests.runtime.agents import Calls
from tests.runtime.background_agents import Gate, Lead, control, delegate, worker
from tests.support import check_invariants, check_tool_calls, until


@contextlib.asynccontextmanager
async def serving(
    backend: str, tmp_path: Path, *agents: AgentConfig, cap: int
) -> AsyncIterator[httpx.AsyncClient]:
    async with database_url(backend, tmp_path) as url:
        settings = Settings(
            database_url=url,
            stream_heartbeat=0.2,
            stream_poll=0.2,
            background_concurrency=cap,
            background_poll=0.05,
        )
        async with (
            serve(AgentRegistry(list(agents)), Calls(), settings) as server,
            httpx.AsyncClient(base_url=server.url, timeout=10) as client,
        ):
            yield client


async def start(client: httpx.AsyncClient, agent_type: str = "lead") -> None:
    answer = await client.post(
        "/start", json={"agentType": agent_type, "message": "go", "sessionId": "L"}
    )
    assert answer.status_code == 201, answer.text


async def status(client: httpx.AsyncClient, session_id: str) -> dict[str, Any]:
    answer = await client.get(f"/status/{session_id}")
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def waiting_lead(launches: list[ToolCall], requests: list[ModelRequest], gate: Gate) -> AgentConfig:
    """Launches, then waits until every session it launched has been told of, then answers
    with the notices it read (as JSON)."""

    def model(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        turn = sum(m.role == "assistant" for m in request.messages)
        if turn == 0:
            return ModelResponse(tool_calls=launches)
        notices = [m.content for m in request.messages if isinstance(m, SystemMessage)]
        if sum(notice.count("\n- ") for notice in notices) < len(launches):
            return ModelResponse(tool_calls=[control(f"w{turn}", "wait")])
        return ModelResponse(text=json.dumps(notices))

    return define_agent("lead", model=FunctionModel(model), delegation=Delegation([worker(gate)]))


def told(notices: list[str]) -> list[str]:
    """The session ids the notices tell of, one per line, in order."""
    return [line.split()[1] for notice in notices for line in notice.splitlines()[1:]]


def frames(chunks: list[Chunk], child: str) -> tuple[int, int]:
    """The indexes of the child's only subagent_start and subagent_end."""
    (begin,) = [
        i
        for i, c in enumerate(chunks)
        if isinstance(c, SubagentStartChunk) and c.sub_session_id == child
    ]
    (end,) = [
        i
        for i, c in enumerate(chunks)
        if isinstance(c, SubagentEndChunk) and c.sub_session_id == child
    ]
    return begin, end


async def test_seven_launches_show_five_running_and_two_queued_and_stream_until_all_end(
    backend: str, tmp_path: Path
) -> None:
    gate = Gate()
    launches = [delegate(f"c{i}", f"job {i}") for i in range(7)]
    children = [f"L-task-c{i}" for i in range(7)]
    requests: list[ModelRequest] = []
    lead = waiting_lead(launches, requests, gate)
    async with serving(backend, tmp_path, lead, cap=5) as client:
        await start(client)
        reading = asyncio.create_task(read_stream(client, "L"))
        await until(lambda: gate.active == 5)
        await asyncio.sleep(0.3)  # several claims later, nothing more starts
        assert (gate.active, gate.most) == (5, 5)
        held = [await status(client, child) for child in children]
        parent = await status(client, "L")
        assert not reading.done()  # the stream goes on while children run
        gate.open()
        read = await asyncio.wait_for(reading, 15)
        done = await status(client, "L")
        ended = [await status(client, child) for child in children]

    # Five run, the two launched last wait in FIFO order, with their places.
    assert [(s["status"], s.get("queuePosition")) for s in held] == [
        *[("running", None)] * 5,
        ("queued", 0),
        ("queued", 1),
    ]
    refs = {ref["subSessionId"]: ref for ref in parent["subSessions"]}
    assert set(refs) == set(children)
    assert {ref["mode"] for ref in refs.values()} == {"background"}
    assert [refs[child]["status"] for child in children] == ["running"] * 5 + ["queued"] * 2
    assert gate.most == 5
    assert sorted(gate.started[:5]) == [f"job {i}" for i in range(5)]
    assert gate.started[5:] == ["job 5", "job 6"]
    assert read.end == {"status": "completed"}
    assert done["status"] == "completed"
    assert [s["status"] for s in ended] == ["completed"] * 7
    # Each end was told exactly once, in the seed's wording.
    notices = json.loads(done["output"])
    assert sorted(told(notices)) == children
    assert all(notice.startswith("Background subagent updates:\n- ") for notice in notices)
    # The stream frames each child's run, its chunks inside, and ends after every frame.
    check_invariants(read.chunks)
    check_tool_calls(read.chunks, "completed")
    for child in children:
        begin, end = frames(read.chunks, child)
        inside = [i for i, c in enumerate(read.chunks) if c.agent_id == child]
        assert inside, f"no chunk of {child}"
        assert all(begin < i < end for i in inside)


async def test_with_a_cap_of_one_children_start_in_launch_order_and_a_cancelled_one_never(
    backend: str, tmp_path: Path
) -> None:
    gate = Gate()
    names = "abcde"
    lead = Lead(
        [
            [delegate(x, f"job {x}") for x in names],
            [control("x", "cancel", session_id="L-task-c")],
            [control("w", "wait", session_ids=["L-task-e"])],
        ]
    )
    agent = lead.agent(Delegation([worker(gate)]))
    async with serving(backend, tmp_path, agent, cap=1) as client:
        await start(client)
        await until(lambda: len(lead.requests) == 3 and gate.started == ["job a"])
        await asyncio.sleep(0.2)  # the lead waits; only `a` runs
        queued = [await status(client, f"L-task-{x}") for x in names]
        gate.open()
        read = await read_stream(client, "L")
        cancelled = await status(client, "L-task-c")
        messages = (await client.get("/sessions/L-task-c/messages")).json()["messages"]

    assert [(s["status"], s.get("queuePosition")) for s in queued] == [
        ("running", None),
        ("queued", 0),
        ("terminated", None),
        ("queued", 1),
        ("queued", 2),
    ]
    assert read.end == {"status": "completed"}
    assert gate.started == ["job a", "job b", "job d", "job e"]  # FIFO, without `c`
    assert gate.most == 1
    assert (cancelled["status"], cancelled["error"]) == ("terminated", "Cancelled by its parent")
    # The cancelled session never ran: no model call, no chunk, only the prompt it was given.
    assert [m["message"]["role"] for m in messages] == ["user"]
    assert not [c for c in read.chunks if c.agent_id == "L-task-c"]
    got = Lead.answers(lead.requests[-1].messages)
    assert got["x"]["lifecycle_status"] == "cancelled"
    (notice,) = got["notices"]  # the four that ended in one notice; the cancel not told
    assert told([notice]) == ["L-task-a", "L-task-b", "L-task-d", "L-task-e"]
    check_invariants(read.chunks)
    check_tool_calls(read.chunks, "completed")


async def test_subagent_wait_parks_the_parent_until_it_wakes_with_one_batched_notice(
    backend: str, tmp_path: Path
) -> None:
    first, second = Gate(), Gate()
    lead = Lead(
        [
            [delegate("a", "job a"), delegate("b", "job b", category="slow")],
            [control("w", "wait", session_ids=["L-task-b"])],
        ]
    )
    agent = lead.agent(Delegation([worker(first), worker(second, name="slow")]))
    async with serving(backend, tmp_path, agent, cap=5) as client:
        await start(client)
        await until(lambda: len(lead.requests) == 2 and first.active == second.active == 1)
        first.open()
        # `a` ends while the lead is parked on `b`: no model call of the lead for it.
        for _ in range(200):
            a = await status(client, "L-task-a")
            if a["status"] == "completed":
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)
        parked = (len(lead.requests), (await status(client, "L"))["status"])
        second.open()
        read = await read_stream(client, "L")

    assert a["status"] == "completed"
    assert parked == (2, "running")
    assert read.end == {"status": "completed"}
    # It woke once, with both ends in one system message, in the order they ended.
    assert len(lead.requests) == 3
    woken = lead.requests[2].messages
    notices = [m.content for m in woken if isinstance(m, SystemMessage)]
    line = (
        '- {0} succeeded. Call subagent_result(session_id="{0}") for the full result or '
        'subagent_result(session_id="{0}", read_method="summary") for the cached summary.'
    )
    assert notices == [
        "\n".join(
            ["Background subagent updates:", line.format("L-task-a"), line.format("L-task-b")]
        )
    ]
    waited = Lead.answers(woken)["w"]["sessions"]
    assert [(s["session_id"], s["lifecycle_status"]) for s in waited] == [("L-task-b", "succeeded")]
    assert [m.content for m in woken if isinstance(m, UserMessage)] == ["go"]
    check_invariants(read.chunks)
    check_tool_calls(read.chunks, "completed")


async def test_an_interrupt_holds_the_queue_and_a_resume_runs_it_in_order(
    backend: str, tmp_path: Path
) -> None:
    gate = Gate()
    lead = Lead(
        [
            [delegate(x, f"job {x}") for x in "abc"],
            [control("w", "wait", session_ids=["L-task-c"])],
        ]
    )
    agent = lead.agent(Delegation([worker(gate)]))
    async with serving(backend, tmp_path, agent, cap=1) as client:
        await start(client)
        await until(lambda: gate.started == ["job a"] and len(lead.requests) == 2)
        before = [await status(client, f"L-task-{x}") for x in "abc"]
        stopped = await client.post("/interrupt/L", json={"reason": "enough"})
        assert stopped.status_code == 202, stopped.text
        first = await read_stream(client, "L")
        held = [await status(client, f"L-task-{x}") for x in "abc"]
        gate.open()
        resumed = await client.post("/resume/L", json={})
        assert resumed.status_code == 200, resumed.text
        rest = await read_stream(client, "L", params={"fromSequence": len(first.chunks)})

    assert [(s["status"], s.get("queuePosition")) for s in before] == [
        ("running", None),
        ("queued", 0),
        ("queued", 1),
    ]
    assert first.end == {"status": "interrupted"}
    assert [(s["status"], s["error"]) for s in held] == [("interrupted", "enough")] * 3
    assert rest.end == {"status": "completed"}
    # `a` ran again from its checkpoint; `b` and `c` kept their places behind it.
    assert gate.started == ["job a", "job a", "job b", "job c"]
    # Each end told once. (The step cut short by the interrupt is made again on resume: it may
    # already read the first ends, and the wait it makes again the rest.)
    notices = Lead.answers(lead.requests[-1].messages)["notices"]
    assert told(notices) == ["L-task-a", "L-task-b", "L-task-c"]
    # Each run of a child is framed (the interrupted wait is made again: no tool-call check).
    check_invariants(first.chunks + rest.chunks)
    starts = [c.sub_session_id for c in rest.chunks if isinstance(c, SubagentStartChunk)]
    assert sorted(starts) == ["L-task-a", "L-task-b", "L-task-c"]
