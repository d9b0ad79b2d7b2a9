"""Persistent children through the companion tools, in process, on every store."""

from __future__ import annotations

import asyncio

from app import AgentRegistry, AgentRuntime
from app.store import StateStore
from tests.runtime.agents import Calls
from tests.runtime.persistent_agents import (
    answers,
    coordinator,
    named,
    researcher,
    send,
    spawn,
)
from tests.support import check_invariants, check_tool_calls


async def run_to_end(runtime: AgentRuntime, agent_name: str, session_id: str) -> str:
    handle = await runtime.execute(agent_name, "go", session_id=session_id)
    result = await asyncio.wait_for(handle.result(), 10)
    assert result.status == "completed", result
    assert isinstance(result.output, str)
    return result.output


async def test_blocking_children_spawn_continue_list_and_terminate(store: StateStore) -> None:
    calls = Calls()
    steps = [
        [spawn("a", "solar", name="sun")],
        [spawn("b", "wind")],
        [send("c", "sun", "and at night?")],
        [named("list", "d")],
        [named("terminate", "e", "researcher-1")],
        [named("status", "f", "researcher-1"), named("status", "g", "nobody")],
        [spawn("h", "wind again", name="researcher-1")],
    ]
    parent = coordinator(calls, researcher(calls), steps)
    async with AgentRuntime(AgentRegistry([parent]), store=store) as runtime:
        got = answers(await run_to_end(runtime, "coordinator", "p"))
        chunks = [chunk async for chunk in runtime.follow("p")]
        refs = {ref.name: ref for ref in await store.get_sub_session_refs("p")}

    assert got["a"] == {"findings": "solar"}
    assert got["b"] == {"findings": "wind"}
    # A completed child continues with its memory.
    assert got["c"] == {"findings": "solar; and at night?"}
    assert got["d"] == {
        "children": [
            {
                "name": "sun",
                "agentType": "researcher",
                "sessionId": "p-agent-sun",
                "status": "completed",
            },
            {
                "name": "researcher-1",
                "agentType": "researcher",
                "sessionId": "p-agent-researcher-1",
                "status": "completed",
            },
        ]
    }
    assert got["e"]["status"] == "terminated"
    assert got["f"]["status"] == "terminated"
    assert got["g"].startswith(
        "error: No child is named 'nobody'; your children: researcher-1, sun"
    )
    # A terminated child's name starts a fresh one: no memory of "wind".
    assert got["h"] == {"findings": "wind again"}
    assert got["notice"] == []  # blocking children's results were the calls' results
    assert {name: (ref.mode, ref.status) for name, ref in refs.items()} == {
        "sun": ("persistent", "completed"),
        "researcher-1": ("persistent", "completed"),
    }
    check_invariants(chunks)
    check_tool_calls(chunks, "completed")
    # Each model call was made once; the fresh researcher-1 started its conversation again.
    assert calls.pop("model p-agent-researcher-1 0") == 2
    assert set(calls.values()) == {1}


async def test_a_background_child_ends_in_one_notice(store: StateStore) -> None:
    calls = Calls()
    steps = [[spawn("a", "solar")], [named("list", "b")], [named("list", "c")]]
    parent = coordinator(calls, researcher(calls), steps, mode="non-blocking")
    async with AgentRuntime(AgentRegistry([parent]), store=store) as runtime:
        got = answers(await run_to_end(runtime, "coordinator", "p"))
        chunks = [chunk async for chunk in runtime.follow("p")]
        (ref,) = await store.get_sub_session_refs("p")

    assert got["a"] == {
        "name": "researcher-1",
        "sessionId": "p-agent-researcher-1",
        "status": "running",
    }
    assert len(got["notice"]) == 1
    assert "'researcher-1' (researcher, session p-agent-researcher-1) completed" in got["notice"][0]
    assert ref.completion_delivered
    check_invariants(chunks)
    check_tool_calls(chunks, "completed")


async def test_the_tree_runs_until_its_background_children_end(store: StateStore) -> None:
    """The coordinator's turn ends while its child still runs: the stream ends after the
    child, and the next turn hears of it."""
    calls = Calls()
    parent = coordinator(
        calls, researcher(calls, slow_on="slow"), [[spawn("a", "slow topic")]], mode="non-blocking"
    )
    async with AgentRuntime(AgentRegistry([parent]), store=store) as runtime:
        first = answers(await run_to_end(runtime, "coordinator", "p"))
        assert first["notice"] == []
        assert (await store.get_session("p-agent-researcher-1")).status == "running"
        chunks = [chunk async for chunk in runtime.follow("p")]
        assert (await store.get_session("p-agent-researcher-1")).status == "completed"
        assert (await store.get_stream("p")).status == "completed"
        handle = await runtime.resume("p", "what did it find?")
        second = await asyncio.wait_for(handle.result(), 10)
    assert isinstance(second.output, str)
    notices = answers(second.output)["notice"]
    (notice,) = notices
    assert "slow topic" in notice
    check_invariants(chunks)
    check_tool_calls(chunks, "completed")


async def test_a_failed_blocking_child_is_a_failure_and_its_name_starts_afresh(
    store: StateStore,
) -> None:
    calls = Calls()
    steps = [
        [spawn("a", "doomed topic", name="x")],
        [send("b", "x", "try again")],
        [spawn("c", "fine topic", name="x")],
    ]
    parent = coordinator(calls, researcher(calls, fail_on="doomed"), steps)
    async with AgentRuntime(AgentRegistry([parent]), store=store) as runtime:
        got = answers(await run_to_end(runtime, "coordinator", "p"))
        results = {
            m.tool_call_id: m.result for m in await store.load_messages("p") if m.role == "tool"
        }
    # Never a completed-looking result for a failed child.
    failure = "cannot research 'doomed topic'"
    assert got["a"] == f"error: {failure}"
    assert results["a"] == {"success": False, "error": failure}
    assert got["b"] == "error: Child 'x' is failed: spawn it again to start it afresh"
    assert got["c"] == {"findings": "fine topic"}


async def test_a_message_to_a_running_child_reaches_it_once(store: StateStore) -> None:
    """The child runs in the background; a message sent meanwhile is in its conversation
    before its next model call (it finishes with it), and the coordinator waits for it."""
    calls = Calls()
    steps = [
        [spawn("a", "slow topic", name="x")],
        [send("b", "x", "also the moon")],
        [named("wait", "c", "x")],
    ]
    child = researcher(calls, slow_on="slow")
    parent = coordinator(calls, child, steps, mode="non-blocking")
    # waitForResult is there only with a blocking child: give the coordinator one too.
    from app import PersistentAgent, define_agent

    both = define_agent(
        "coordinator",
        persistent_agents=[
            PersistentAgent(child, mode="non-blocking"),
            PersistentAgent(researcher(calls, name="helper"), mode="blocking"),
        ],
        model=parent.model,
    )
    async with AgentRuntime(AgentRegistry([both]), store=store) as runtime:
        got = answers(await run_to_end(runtime, "coordinator", "p"))
        messages = await store.load_messages("p-agent-x")
        (ref,) = [r for r in await store.get_sub_session_refs("p") if r.name == "x"]
    assert got["b"] == {"name": "x", "sessionId": "p-agent-x", "status": "running", "queued": True}
    assert got["c"] == {"findings": "slow topic; also the moon"}
    assert [m.content for m in messages if m.role == "user"] == ["slow topic", "also the moon"]
    assert ref.completion_delivered  # the wait took its result: no notice
    assert got["notice"] == []
    assert await store.read_inbox("p-agent-x") == []


async def test_an_interrupt_stops_background_children_and_a_resume_finishes_them(
    store: StateStore,
) -> None:
    calls = Calls()
    parent = coordinator(
        calls, researcher(calls, slow_on="slow"), [[spawn("a", "slow topic")]], mode="non-blocking"
    )
    child = "p-agent-researcher-1"
    async with AgentRuntime(AgentRegistry([parent]), store=store) as runtime:
        await run_to_end(runtime, "coordinator", "p")
        assert await runtime.interrupt("p", "enough") == "running"
        first = [chunk async for chunk in runtime.follow("p")]
        stopped = await store.get_session(child)
        handle = await runtime.resume("p")
        assert handle.session_id == child
        await asyncio.wait_for(handle.result(), 10)
        whole = [chunk async for chunk in runtime.follow("p")]
        done = await store.get_session(child)
        root = await store.get_session("p")
    assert (stopped.status, stopped.error) == ("interrupted", "enough")
    assert (done.status, done.output) == ("completed", {"findings": "slow topic"})
    assert root.status == "completed"
    # The model call the interrupt cut short was made again; nothing committed was.
    assert calls[f"model {child} 0"] == 2
    check_invariants(whole)
    check_tool_calls(whole, "completed")
    assert len(whole) > len(first)


async def test_a_background_child_is_taken_over_after_its_server_dies(store: StateStore) -> None:
    calls = Calls()
    parent = coordinator(
        calls, researcher(calls, slow_on="slow"), [[spawn("a", "slow topic")]], mode="non-blocking"
    )
    registry = AgentRegistry([parent])
    child = "p-agent-researcher-1"
    async with AgentRuntime(registry, store=store, lease_ms=200, takeover_interval=None) as doomed:
        await run_to_end(doomed, "coordinator", "p")
        assert (await store.get_session(child)).status == "running"
    # Leaving the block stops the runtime as a crash would: nothing more is written.
    assert (await store.get_session(child)).status == "running"
    async with AgentRuntime(registry, store=store, takeover_interval=0.05) as heir:
        for _ in range(400):
            if (await store.get_stream("p")).status != "running":
                break
            await asyncio.sleep(0.01)
        chunks = [chunk async for chunk in heir.follow("p")]
        record = await store.get_session(child)
        handle = await heir.resume("p", "and?")
        second = await asyncio.wait_for(handle.result(), 10)
    assert (record.status, record.output) == ("completed", {"findings": "slow topic"})
    assert (await store.get_stream("p")).status == "completed"
    assert calls[f"model {child} 0"] == 2  # in flight at the crash
    assert isinstance(second.output, str)
    assert len(answers(second.output)["notice"]) == 1
    check_invariants(chunks)


async def test_spawns_of_one_step_take_names_in_call_order(store: StateStore) -> None:
    calls = Calls()
    steps = [[spawn("a", "solar"), spawn("b", "wind"), spawn("c", "tide", name="researcher-2")]]
    parent = coordinator(calls, researcher(calls), steps, mode="non-blocking")
    async with AgentRuntime(AgentRegistry([parent]), store=store) as runtime:
        got = answers(await run_to_end(runtime, "coordinator", "p"))
        chunks = [chunk async for chunk in runtime.follow("p")]
        refs = await store.get_sub_session_refs("p")
    assert got["a"]["name"] == "researcher-1"
    assert got["b"]["name"] == "researcher-2"
    # The name an earlier call of the step took is running: no second session is made.
    assert got["c"].startswith("error: Child 'researcher-2' is running")
    assert [ref.name for ref in refs] == ["researcher-1", "researcher-2"]
    check_invariants(chunks)
