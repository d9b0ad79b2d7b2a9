"""Background delegation (`subagent` with `background`), in process, on every store: the
queue's cap and order, positions, cancel, wait and the batched notices, the result payload,
timeouts, an interrupt and a takeover."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from app import AgentRegistry, AgentRuntime, Delegation, FreeSubagents, Subagent, define_agent
from app.agents import AgentHooks
from app.models import FunctionModel, ModelRequest, ModelResponse, ToolCall
from app.protocol import SystemMessage, ToolMessage
from app.runtime.scheduler import BackgroundSettings
from app.store import StateStore, WriteBatch, create_store
from tests.databases import postgres_database
from tests.runtime.background_agents import Gate, Lead, control, delegate, worker
from tests.support import check_invariants, check_tool_calls, until

PAYLOAD_KEYS = {
    "status",
    "session_id",
    "category",
    "lifecycle_status",
    "read_method",
    "artifact_id",
    "record_path",
    "inline_content",
    "error",
}


def waiting_lead(launches: list[ToolCall], requests: list[ModelRequest]) -> FunctionModel:
    """Launches, then waits until every session it launched has been told of, then answers
    with the notices it read."""

    def model(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        turn = sum(m.role == "assistant" for m in request.messages)
        if turn == 0:
            return ModelResponse(tool_calls=launches)
        notices = [m.content for m in request.messages if isinstance(m, SystemMessage)]
        told = sum(notice.count("\n- ") for notice in notices)
        if told < len(launches):
            return ModelResponse(tool_calls=[control(f"w{turn}", "wait")])
        return ModelResponse(text=json.dumps(notices))

    return FunctionModel(model)


async def test_seven_launches_run_five_at_once_in_order_and_are_told_once(
    store: StateStore,
) -> None:
    gate = Gate()
    launches = [delegate(f"c{i}", f"job {i}") for i in range(7)]
    requests: list[ModelRequest] = []
    lead = define_agent(
        "lead",
        model=waiting_lead(launches, requests),
        delegation=Delegation([worker(gate)]),
    )
    settings = BackgroundSettings(concurrency=5, poll=0.05)
    async with AgentRuntime(AgentRegistry([lead]), store=store, background=settings) as runtime:
        handle = await runtime.execute("lead", "go", session_id="L")
        await until(lambda: gate.active == 5)
        await asyncio.sleep(0.1)  # nothing more starts
        assert gate.active == 5
        queued = [await runtime.status(f"L-task-c{i}") for i in (5, 6)]
        assert [(s.status, s.queue_position) for s in queued] == [("queued", 0), ("queued", 1)]
        assert await store.queue_counts() == (2, 5)
        parent = await runtime.status("L")
        modes = {ref.sub_session_id: (ref.mode, ref.status) for ref in parent.sub_sessions}
        assert modes[("L-task-c6")] == ("background", "queued")
        gate.open()
        result = await asyncio.wait_for(handle.result(), 10)
        chunks = [chunk async for chunk in runtime.follow("L")]

    assert result.status == "completed", result
    assert gate.most == 5
    assert sorted(gate.started[:5]) == [f"job {i}" for i in range(5)]
    assert gate.started[5:] == ["job 5", "job 6"]
    launched = [m for m in requests[1].messages if isinstance(m, ToolMessage)]
    # Each launch answers where its child is: queued, or running if it got a slot at once.
    states = [m.result["lifecycle_status"] for m in launched]  # type: ignore[index]
    assert set(states) <= {"queued", "running"}
    assert states[5:] == ["queued", "queued"]
    notices = json.loads(result.output)  # type: ignore[arg-type]
    told = [line.split()[1] for notice in notices for line in notice.splitlines()[1:]]
    assert sorted(told) == sorted(f"L-task-c{i}" for i in range(7))  # each exactly once
    assert all(notice.startswith("Background subagent updates:\n- ") for notice in notices)
    assert all(" succeeded. Call subagent_result(session_id=" in notice for notice in notices)
    assert await store.queue_counts() == (0, 0)
    check_invariants(chunks)
    check_tool_calls(chunks, "completed")


async def test_the_end_that_frees_a_slot_is_not_held_back(store: StateStore) -> None:
    # A held batch may wait for another write to join (2 ms on SQL stores): the next queued
    # session would wait for it too, on every hand-off of the slot.
    ends: list[tuple[list[str], bool]] = []
    submit = store.submit

    def watched(batch: WriteBatch, *, hold: bool = False) -> asyncio.Future[None]:
        if batch.dequeued:
            ends.append((list(batch.dequeued), hold))
        return submit(batch, hold=hold)

    store.submit = watched  # type: ignore[method-assign]
    launches = [delegate(f"c{i}", f"job {i}") for i in range(3)]
    lead = define_agent("lead", model=waiting_lead(launches, []), delegation=Delegation([worker()]))
    settings = BackgroundSettings(concurrency=1, poll=30)
    async with AgentRuntime(AgentRegistry([lead]), store=store, background=settings) as runtime:
        result = await asyncio.wait_for(
            (await runtime.execute("lead", "go", session_id="L")).result(), 10
        )

    assert result.status == "completed", result
    assert sorted(ends) == [([f"L-task-c{i}"], False) for i in range(3)]


async def test_a_cancelled_queued_session_never_starts(store: StateStore) -> None:
    gate = Gate()
    lead = Lead(
        [
            [delegate("a", "job a"), delegate("b", "job b"), delegate("c", "job c")],
            [control("x", "cancel", session_id="L-task-b")],
            [control("y", "status")],
            [control("w", "wait", session_ids=["L-task-a", "L-task-c"])],
            [control("v", "wait", session_ids=["L-task-c"])],
            [control("r", "result", session_id="L-task-b")],
        ]
    )
    settings = BackgroundSettings(concurrency=1, poll=0.05)
    agent = lead.agent(Delegation([worker(gate)]))
    async with AgentRuntime(AgentRegistry([agent]), store=store, background=settings) as runtime:
        handle = await runtime.execute("lead", "go", session_id="L")
        await until(lambda: len(lead.requests) >= 3)
        gate.open()
        result = await asyncio.wait_for(handle.result(), 10)
        b = await runtime.status("L-task-b")

    assert result.status == "completed", result
    got = Lead.answers(lead.requests[-1].messages)
    assert gate.started == ["job a", "job c"]
    assert got["x"] == {
        "session_id": "L-task-b",
        "category": "worker",
        "lifecycle_status": "cancelled",
    }
    assert (b.status, b.error) == ("terminated", "Cancelled by its parent")
    # The table may come before a's first claim has landed (the lead does not wait for it).
    table = got["y"].splitlines()[2:]
    assert table in (
        [
            "| L-task-a | worker | running | - |",
            "| L-task-b | worker | cancelled | - |",
            "| L-task-c | worker | queued | 0 |",
        ],
        [
            "| L-task-a | worker | queued | 0 |",
            "| L-task-b | worker | cancelled | - |",
            "| L-task-c | worker | queued | 1 |",
        ],
    )
    assert set(got["r"]) == PAYLOAD_KEYS
    assert (got["r"]["status"], got["r"]["lifecycle_status"]) == ("error", "cancelled")
    told = "\n".join(got["notices"])
    assert "L-task-b" not in told  # a cancel is not told
    assert told.count("L-task-a succeeded") == told.count("L-task-c succeeded") == 1


async def test_results_in_full_and_in_summary_and_errors_the_model_can_fix(
    store: StateStore,
) -> None:
    lead = Lead(
        [
            [delegate("a", "job a")],
            [control("w", "wait")],
            [
                control("f", "result", session_id="L-task-a"),
                control("s", "result", session_id="L-task-a", read_method="summary"),
                control("u", "status", session_id="L-task-zzz"),
                delegate("bad", "job", category="nobody"),
                ToolCall("subagent", {"category": "worker"}, id="empty"),
                control("t", "status", session_id="L-task-a"),
            ],
        ]
    )
    agent = lead.agent(Delegation([worker()]))
    async with AgentRuntime(AgentRegistry([agent]), store=store) as runtime:
        result = await (await runtime.execute("lead", "go", session_id="L")).result()

    assert result.status == "completed", result
    got = Lead.answers(lead.requests[-1].messages)
    full, summary = got["f"], got["s"]
    assert set(full) == set(summary) == PAYLOAD_KEYS
    assert full["status"] == "success"
    assert full["inline_content"] == "All of job a, done."
    assert full["artifact_id"].startswith("subagent_")
    assert full["record_path"] == "/status/L-task-a"
    assert (summary["read_method"], summary["inline_content"]) == ("summary", "did job a")
    assert got["u"].startswith("error: No background session 'L-task-zzz' of yours")
    assert got["bad"].startswith("error: ")
    assert "nobody" in got["bad"]
    assert got["empty"].startswith("error: ")
    assert got["t"] == {
        "session_id": "L-task-a",
        "category": "worker",
        "lifecycle_status": "succeeded",
    }
    assert len(got["notices"]) == 1


async def test_a_waiting_subagent_call_returns_the_childs_output(store: StateStore) -> None:
    lead = Lead([[delegate("a", "job a", background=False)]])
    agent = lead.agent(Delegation([worker()]))
    async with AgentRuntime(AgentRegistry([agent]), store=store) as runtime:
        result = await (await runtime.execute("lead", "go", session_id="L")).result()
        refs = await store.get_sub_session_refs("L")
        chunks = [chunk async for chunk in runtime.follow("L")]

    assert result.status == "completed", result
    got = Lead.answers(lead.requests[-1].messages)
    assert "All of job a, done." in got["a"]
    assert [(ref.sub_session_id, ref.mode, ref.status) for ref in refs] == [
        ("L-task-a", "ephemeral", "completed")
    ]
    check_invariants(chunks)
    check_tool_calls(chunks, "completed")


async def test_a_background_session_runs_out_of_its_time(store: StateStore) -> None:
    lead = Lead(
        [
            [delegate("a", "sleep 5", timeout=0.2)],
            [control("w", "wait")],
            [control("r", "result", session_id="L-task-a")],
        ]
    )
    agent = lead.agent(Delegation([worker()]))
    async with AgentRuntime(AgentRegistry([agent]), store=store) as runtime:
        result = await asyncio.wait_for(
            (await runtime.execute("lead", "go", session_id="L")).result(), 10
        )
        child = await runtime.status("L-task-a")

    assert result.status == "completed", result
    got = Lead.answers(lead.requests[-1].messages)
    assert (child.status, child.failure_reason) == ("failed", "timeout")
    assert got["r"]["lifecycle_status"] == "timed_out"
    assert got["notices"] == [
        "Background subagent updates:\n- L-task-a timed out. Call "
        'subagent_result(session_id="L-task-a") for details.'
    ]


async def test_an_interrupt_holds_the_queue_and_a_resume_keeps_its_order(
    store: StateStore,
) -> None:
    gate = Gate()
    lead = Lead(
        [
            [delegate("a", "job a"), delegate("b", "job b"), delegate("c", "job c")],
            [control("w", "wait", session_ids=["L-task-c"])],
        ]
    )
    settings = BackgroundSettings(concurrency=1, poll=0.05)
    agent = lead.agent(Delegation([worker(gate)]))
    async with AgentRuntime(AgentRegistry([agent]), store=store, background=settings) as runtime:
        handle = await runtime.execute("lead", "go", session_id="L")
        await until(lambda: gate.started == ["job a"] and len(lead.requests) == 2)
        await runtime.interrupt("L", "stop")
        stopped = await asyncio.wait_for(handle.result(), 10)
        [chunk async for chunk in runtime.follow("L")]  # the stream ends with the tree
        held = [await runtime.status(f"L-task-{x}") for x in "abc"]
        entries = await store.list_queue("L")
        gate.open()
        resumed = await runtime.resume("L")
        result = await asyncio.wait_for(resumed.result(), 10)
        chunks = [chunk async for chunk in runtime.follow("L")]

    assert stopped.status == "interrupted"
    assert [s.status for s in held] == ["interrupted"] * 3
    assert [(e.session_id, e.state) for e in entries] == [
        ("L-task-a", "held"),
        ("L-task-b", "held"),
        ("L-task-c", "held"),
    ]
    assert result.status == "completed", result
    # a ran again from its checkpoint; b and c kept their places after it.
    assert gate.started == ["job a", "job a", "job b", "job c"]
    check_invariants(chunks)


async def test_a_takeover_runs_the_queue_on_and_tells_each_end_once(
    store: StateStore, tmp_path: Any
) -> None:
    gate = Gate()
    launches = [delegate(f"c{i}", f"job {i}") for i in range(3)]
    requests: list[ModelRequest] = []
    lead = define_agent(
        "lead", model=waiting_lead(launches, requests), delegation=Delegation([worker(gate)])
    )
    settings = BackgroundSettings(concurrency=1, poll=0.05)
    registry = AgentRegistry([lead])
    async with AgentRuntime(
        registry, store=store, lease_ms=300, takeover_interval=None, background=settings
    ) as doomed:
        await doomed.execute("lead", "go", session_id="L")
        await until(lambda: gate.started == ["job 0"])
        # Leaving the block stops the runtime as a crash would: nothing more is written.
    gate.open()
    async with AgentRuntime(
        registry, store=store, takeover_interval=0.05, background=settings
    ) as heir:
        await until(lambda: len(gate.started) == 4, timeout=10)
        record = await heir.status("L")
        await until_completed(heir, "L")
        result = await heir.status("L")
        chunks = [chunk async for chunk in heir.follow("L")]

    assert record.status in ("running", "completed")
    assert result.status == "completed"
    assert gate.started == ["job 0", "job 0", "job 1", "job 2"]
    notices = json.loads(str(result.output))
    told = [line.split()[1] for notice in notices for line in notice.splitlines()[1:]]
    assert sorted(told) == ["L-task-c0", "L-task-c1", "L-task-c2"]
    check_invariants(chunks)


async def until_completed(runtime: AgentRuntime, session_id: str) -> None:
    for _ in range(500):
        if (await runtime.status(session_id)).status == "completed":
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{session_id} did not complete")


async def test_a_timeout_comes_from_the_call_the_category_the_delegation_or_the_server(
    store: StateStore,
) -> None:
    lead = Lead(
        [
            [
                delegate("call", "sleep 5", timeout=0.1),
                delegate("category", "sleep 5", category="slow"),
                delegate("delegation", "sleep 5"),
            ],
            [control("w", "wait", session_ids=["L-task-call"])],
            [control("x", "wait", session_ids=["L-task-category"])],
            [control("y", "wait", session_ids=["L-task-delegation"])],
        ]
    )
    delegation = Delegation(
        [worker(), Subagent(worker(name="slow"), timeout=0.2)], default_timeout=0.3
    )
    agent = lead.agent(delegation)
    server = BackgroundSettings(timeout=60.0)
    async with AgentRuntime(AgentRegistry([agent]), store=store, background=server) as runtime:
        handle = await runtime.execute("lead", "go", session_id="L")
        result = await asyncio.wait_for(handle.result(), 10)
        ended = {x: await runtime.status(f"L-task-{x}") for x in ("call", "category", "delegation")}

    assert result.status == "completed", result
    assert {x: (s.status, s.failure_reason, s.error) for x, s in ended.items()} == {
        "call": ("failed", "timeout", "The subagent timed out after 0.1s"),
        "category": ("failed", "timeout", "The subagent timed out after 0.2s"),
        "delegation": ("failed", "timeout", "The subagent timed out after 0.3s"),
    }


async def test_without_a_timeout_of_its_own_a_child_has_the_servers(store: StateStore) -> None:
    lead = Lead([[delegate("a", "sleep 5")], [control("w", "wait")]])
    agent = lead.agent(Delegation([worker()]))
    server = BackgroundSettings(timeout=0.1)
    async with AgentRuntime(AgentRegistry([agent]), store=store, background=server) as runtime:
        handle = await runtime.execute("lead", "go", session_id="L")
        result = await asyncio.wait_for(handle.result(), 10)
        child = await runtime.status("L-task-a")

    assert result.status == "completed", result
    assert (child.failure_reason, child.error) == ("timeout", "The subagent timed out after 0.1s")


async def test_the_parents_hook_hears_of_each_child_it_delegates_to(store: StateStore) -> None:
    heard: list[tuple[str, str, Any]] = []

    def before(ctx: Any, agent_type: str, child_id: str, child_input: Any) -> None:
        heard.append((agent_type, child_id, child_input["prompt"]))

    lead = Lead(
        [[delegate("a", "job a"), delegate("b", "job b", background=False)], [control("w", "wait")]]
    )
    agent = lead.agent(Delegation([worker()]), hooks=AgentHooks(before_sub_agent=before))
    async with AgentRuntime(AgentRegistry([agent]), store=store) as runtime:
        result = await (await runtime.execute("lead", "go", session_id="L")).result()

    assert result.status == "completed", result
    assert sorted(heard) == [("worker", "L-task-a", "job a"), ("worker", "L-task-b", "job b")]


async def test_a_free_form_child_is_built_again_after_a_takeover(store: StateStore) -> None:
    opened = asyncio.Event()
    asked: list[ModelRequest] = []

    async def model(request: ModelRequest) -> ModelResponse:
        if request.session_id == "L-task-f":
            asked.append(request)
            await opened.wait()
            return ModelResponse(text="a fair critique")
        turn = sum(m.role == "assistant" for m in request.messages)
        if turn == 0:
            return ModelResponse(tool_calls=[delegate("f", "the plan", category="critic")])
        if turn == 1:
            return ModelResponse(tool_calls=[control("w", "wait")])
        return ModelResponse(text="done")

    lead = define_agent(
        "lead",
        model=FunctionModel(model),
        delegation=Delegation(free_form=FreeSubagents(system_prompt="You are a {category}.")),
    )
    registry = AgentRegistry([lead])
    async with AgentRuntime(registry, store=store, lease_ms=300, takeover_interval=None) as doomed:
        await doomed.execute("lead", "go", session_id="L")
        await until(lambda: len(asked) == 1)
    opened.set()
    async with AgentRuntime(registry, store=store, takeover_interval=0.05) as heir:
        await until_completed(heir, "L")
        child = await heir.status("L-task-f")

    assert (child.agent_type, child.status, child.output) == (
        "critic",
        "completed",
        "a fair critique",
    )
    assert len(asked) == 2  # the heir built the same free-form child and ran it again
    assert asked[1].system_prompt.startswith("You are a critic.")


async def test_a_slot_freed_in_another_process_is_taken_at_once_on_postgres() -> None:
    # Two runtimes on one database, as two servers: B's child holds the only slot, A's waits
    # for it. With a poll of 30 s, only the store's notification can start A's child soon.
    settings = BackgroundSettings(concurrency=1, poll=30)
    held, waiting = Gate(), Gate()
    waiting.open()

    def runtime(gate: Gate, store: StateStore) -> AgentRuntime:
        launches = [delegate("c", "job")]
        lead = define_agent(
            "lead", model=waiting_lead(launches, []), delegation=Delegation([worker(gate)])
        )
        return AgentRuntime(AgentRegistry([lead]), store=store, background=settings)

    async with (
        postgres_database() as url,
        create_store(url) as store_a,
        create_store(url) as store_b,
        runtime(waiting, store_a) as a,
        runtime(held, store_b) as b,
    ):
        handle_b = await b.execute("lead", "go", session_id="B")
        await until(lambda: held.started == ["job"])
        handle_a = await a.execute("lead", "go", session_id="A")
        await until_queued(store_a, "A-task-c")
        await asyncio.sleep(0.2)
        assert waiting.started == []
        loop = asyncio.get_running_loop()
        freed = loop.time()
        held.open()
        await until(lambda: waiting.started == ["job"], timeout=5)
        waited = loop.time() - freed
        results = await asyncio.wait_for(asyncio.gather(handle_a.result(), handle_b.result()), 10)

    assert waited < 1.0, waited
    assert [result.status for result in results] == ["completed", "completed"]


async def until_queued(store: StateStore, session_id: str) -> None:
    for _ in range(500):
        entry = await store.queue_entry(session_id)
        if entry is not None and entry.state == "queued":
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{session_id} was not queued")


async def test_a_launch_an_interrupt_cut_after_its_write_starts_its_child_on_resume(
    store: StateStore,
) -> None:
    running: list[AgentRuntime] = []

    async def before(ctx: Any, agent_type: str, child_id: str, child_input: Any) -> None:
        await running[0].interrupt("L", "stop")  # the child is stored; nothing runs it yet
        await asyncio.sleep(5)

    lead = Lead([[delegate("a", "job a")], [control("w", "wait")]])
    agent = lead.agent(Delegation([worker()]), hooks=AgentHooks(before_sub_agent=before))
    async with AgentRuntime(AgentRegistry([agent]), store=store) as runtime:
        running.append(runtime)
        stopped = await asyncio.wait_for(
            (await runtime.execute("lead", "go", session_id="L")).result(), 10
        )
        [chunk async for chunk in runtime.follow("L")]
        queued = await runtime.status("L-task-a")
        resumed = await asyncio.wait_for((await runtime.resume("L")).result(), 10)
        child = await runtime.status("L-task-a")

    assert stopped.status == "interrupted"
    assert queued.status == "queued"
    assert resumed.status == "completed", resumed
    assert child.status == "completed"
