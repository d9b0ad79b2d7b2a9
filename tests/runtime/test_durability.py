"""Durable by step, on every store: a run stopped between steps, or abandoned mid-step as by a
crash, resumes on a fresh store instance without repeating a committed model or tool call."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from app import AgentRegistry, AgentRuntime, create_sub_agent_tool, define_agent, define_tool
from app.agents import ToolContext
from app.errors import (
    LifecycleError,
    SessionExistsError,
    SessionNotFoundError,
    StoreError,
    StoreUnavailableError,
    StreamNotFoundError,
)
from app.models import (
    FunctionModel,
    Model,
    ModelEvent,
    ModelRequest,
    ModelResponse,
    TextDelta,
    ToolCall,
    ToolCallReady,
)
from app.protocol import (
    AssistantMessage,
    SubSessionRef,
    ToolEndChunk,
    ToolMessage,
    ToolStartChunk,
)
from app.runtime.stale import STALE_CALL
from app.store import (
    MemoryStore,
    RefUpsert,
    SessionRecord,
    StateStore,
    StreamUpdate,
    WriteBatch,
    create_store,
    now_ms,
)
from tests.databases import database_url
from tests.support import check_invariants, check_tool_calls, snapshot, until, until_status

SHORT_LEASE = 600
"""The lease of a runtime a test lets die: short, for its heir to wait little, yet long enough
that a pause of the garbage collector (100-190 ms seen under load) does not lose it."""


class Job(BaseModel):
    message: str


class Count(BaseModel):
    n: int


class Total(BaseModel):
    total: int


def build(calls: Counter[str], pause: dict[str, float]) -> AgentRegistry:
    """A root delegating to 3 workers at once; each worker counts twice (two steps with a tool
    call each) and finishes. Model calls are keyed by session and turn, tool calls by call id.
    `pause` holds seconds by agent type (its model calls), `tool`, or `tool <session id>`."""

    async def count(input: Count, ctx: ToolContext[Any]) -> int:
        calls[f"tool {ctx.session_id} {ctx.tool_call_id}"] += 1
        await asyncio.sleep(pause.get(f"tool {ctx.session_id}", pause.get("tool", 0)))
        return input.n + 1

    class Scripted(Model):
        def __init__(self, decide: Any) -> None:
            self.decide = decide

        async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
            turn = sum(m.role == "assistant" for m in request.messages)
            calls[f"model {request.session_id} {turn}"] += 1
            await asyncio.sleep(pause.get(request.agent_type, 0))
            yield TextDelta(f"{request.agent_type} turn {turn}")
            for call in self.decide(request, turn):
                yield ToolCallReady(call)

    def worker(request: ModelRequest, turn: int) -> list[ToolCall]:
        if turn < 2:
            return [ToolCall("count", {"n": turn})]
        return [ToolCall("__finish__", {"total": turn})]

    def root(request: ModelRequest, turn: int) -> list[ToolCall]:
        if turn == 0:
            return [ToolCall("subagent__worker", {"message": f"job {i}"}) for i in range(3)]
        assert all(
            isinstance(m.result, dict) for m in request.messages if isinstance(m, ToolMessage)
        )
        return []

    tool = define_tool("count", description="Count.", input_schema=Count)(count)
    worker_agent = define_agent("worker", tools=[tool], output_schema=Total, model=Scripted(worker))
    root_agent = define_agent(
        "root", tools=[create_sub_agent_tool(worker_agent, Job)], model=Scripted(root)
    )
    return AgentRegistry([root_agent])


EVERY_CALL = Counter(
    {"model r 0": 1, "model r 1": 1}
    | {f"model r-sub-call-0-{i} {turn}": 1 for i in range(3) for turn in range(3)}
    | {f"tool r-sub-call-0-{i} call-{turn}-0": 1 for i in range(3) for turn in range(2)}
)
"""Each model and tool call of the tree, once."""


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def opener(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    """Opens store instances on one database: a fresh instance each time (memory: the same)."""
    if request.param == "memory":
        memory = MemoryStore()
        async with memory:

            @contextlib.asynccontextmanager
            async def same() -> AsyncIterator[StateStore]:
                yield memory

            yield same
        return
    async with database_url(request.param, tmp_path) as url:

        @contextlib.asynccontextmanager
        async def fresh() -> AsyncIterator[StateStore]:
            async with create_store(url) as store:
                yield store

        yield fresh


async def test_a_run_stopped_between_steps_resumes_on_a_fresh_store(opener: Any) -> None:
    calls: Counter[str] = Counter()
    pause = {"worker": 0.05, "tool": 0.1}
    registry = build(calls, pause)
    async with opener() as store, AgentRuntime(registry, store=store) as runtime:
        handle = await runtime.execute("root", "go", session_id="r")
        # Every worker has made its first model call and is running its first tool.
        await until(lambda: sum(k.startswith("tool") for k in calls) == 3)
        await runtime.interrupt("r", "pause")
        assert (await handle.result()).status == "interrupted"
        stopped = Counter(calls)
    pause.clear()
    async with opener() as store, AgentRuntime(registry, store=store) as runtime:
        result = await (await runtime.resume("r")).result()
        chunks = [chunk async for chunk in runtime.follow("r")]
        workers = [(await runtime.status(f"r-sub-call-0-{i}")).status for i in range(3)]

    assert (result.status, result.output) == ("completed", "root turn 1")
    assert workers == ["completed"] * 3
    assert [c.sequence for c in chunks] == list(range(1, len(chunks) + 1))
    # Each worker's first step (its response and the tool the interrupt cut short) was not
    # committed: it was made again, model call and tool. Nothing committed ran twice.
    assert stopped == Counter(
        {"model r 0": 1}
        | {f"model r-sub-call-0-{i} 0": 1 for i in range(3)}
        | {f"tool r-sub-call-0-{i} call-0-0": 1 for i in range(3)}
    )
    assert calls == EVERY_CALL + Counter(
        {f"tool r-sub-call-0-{i} call-0-0": 1 for i in range(3)}
        | {f"model r-sub-call-0-{i} 0": 1 for i in range(3)}
    )


async def test_a_run_abandoned_mid_step_is_taken_over_on_a_fresh_store(opener: Any) -> None:
    calls: Counter[str] = Counter()
    pause = {"worker": 0.3}
    registry = build(calls, pause)
    async with opener() as store:
        async with AgentRuntime(
            registry, store=store, lease_ms=SHORT_LEASE, takeover_interval=None
        ) as doomed:
            await doomed.execute("root", "go", session_id="r")
            # Each worker has committed its first step and is inside its second model call.
            await until(lambda: sum(k.endswith(" 1") and "sub" in k for k in calls) == 3)
        # Leaving the block stops the runtime as a crash would: nothing more is written.
        assert (await store.get_session("r")).status == "running"
        crashed = Counter(calls)
    pause.clear()
    async with (
        opener() as store,
        AgentRuntime(registry, store=store, takeover_interval=0.05) as heir,
    ):
        await until_status(store, "r", "completed")
        chunks = [chunk async for chunk in heir.follow("r")]
        status = await heir.status("r")

    assert status.output == "root turn 1"
    assert [c.sequence for c in chunks] == list(range(1, len(chunks) + 1))
    in_flight = Counter({f"model r-sub-call-0-{i} 1": 1 for i in range(3)})
    assert crashed == Counter(
        {"model r 0": 1}
        | {f"model r-sub-call-0-{i} {t}": 1 for i in range(3) for t in range(2)}
        | {f"tool r-sub-call-0-{i} call-0-0": 1 for i in range(3)}
    )
    # Only the model calls in flight at the crash were made again.
    assert calls == EVERY_CALL + in_flight


class LosesOneWrite(MemoryStore):
    """A memory store that loses the first write of `session_id`'s conversation, as a
    connection reset in the middle of a commit would."""

    def __init__(self, session_id: str) -> None:
        super().__init__()
        self.session_id = session_id
        self.lost = False

    def submit(self, batch: WriteBatch, *, hold: bool = False) -> asyncio.Future[None]:
        if self.lost or all(m.session_id != self.session_id for m in batch.messages):
            return super().submit(batch, hold=hold)
        self.lost = True
        outcome: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        outcome.set_exception(StoreUnavailableError("Could not commit: connection reset"))
        return outcome


async def test_a_tree_whose_write_was_lost_is_taken_over_once_its_last_run_has_ended() -> None:
    """A lost write gives the root's run up at once, while the children of its step that are
    still in a tool end at their own next write, later. The tree is no longer run here once the
    last of them has ended: its lease lapses and the same process takes it over."""
    calls: Counter[str] = Counter()
    pause = {"tool r-sub-call-0-1": 0.2, "tool r-sub-call-0-2": 0.2}
    registry = build(calls, pause)
    store = LosesOneWrite("r-sub-call-0-0")
    async with (
        store,
        AgentRuntime(registry, store=store, lease_ms=300, takeover_interval=0.05) as runtime,
    ):
        await runtime.execute("root", "go", session_id="r")
        await until_status(store, "r", "completed", timeout=5)
        workers = [(await runtime.status(f"r-sub-call-0-{i}")).status for i in range(3)]
    assert store.lost
    assert workers == ["completed"] * 3


async def test_an_interrupt_of_an_orphaned_tree_reaches_every_session(opener: Any) -> None:
    """The owner dies; an interrupt arrives while no one runs the tree; whoever takes it over
    stops it at once, and the children the dead owner ran stop with it (none stays running
    with no owner)."""
    calls: Counter[str] = Counter()
    pause = {"worker": 0.3}
    registry = build(calls, pause)
    workers = [f"r-sub-call-0-{i}" for i in range(3)]
    async with opener() as store:
        async with AgentRuntime(
            registry, store=store, lease_ms=SHORT_LEASE, takeover_interval=None
        ) as doomed:
            await doomed.execute("root", "go", session_id="r")
            await until(lambda: sum(k.endswith(" 1") and "sub" in k for k in calls) == 3)
        assert (await store.get_session("r")).status == "running"
    async with opener() as store:
        async with AgentRuntime(registry, store=store, takeover_interval=None) as bystander:
            assert await bystander.interrupt("r", "stop it") == "running"
        async with AgentRuntime(registry, store=store, takeover_interval=0.05) as heir:
            await until_status(store, "r", "interrupted")
            statuses = [(await store.get_session(w)).status for w in workers]
            refs = [ref.status for ref in await store.get_sub_session_refs("r")]
            assert await heir.interrupt(workers[0]) == "interrupted"
            record = await store.get_session("r")
    assert statuses == ["interrupted"] * 3
    assert refs == ["interrupted"] * 3
    assert (record.status, record.error) == ("interrupted", "stop it")


@pytest.fixture(params=["sqlite", "postgres"])
async def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    async with database_url(request.param, tmp_path) as url:
        yield url


async def test_an_interrupt_sent_to_another_process_stops_the_tree(shared_url: str) -> None:
    calls: Counter[str] = Counter()
    pause = {"worker": 0.05, "tool": 5.0}
    registry = build(calls, pause)
    async with (
        create_store(shared_url) as here,
        create_store(shared_url) as there,
        AgentRuntime(registry, store=here, owner_id="here") as running,
        AgentRuntime(registry, store=there, owner_id="there") as elsewhere,
    ):
        handle = await running.execute("root", "go", session_id="r")
        await until(lambda: sum(k.startswith("tool") for k in calls) == 3)
        asked = time.monotonic()
        assert await elsewhere.interrupt("r", "from afar") == "running"
        result = await handle.result()
        latency = time.monotonic() - asked
        statuses = [
            (await elsewhere.status(sid)).status
            for sid in ["r", *(f"r-sub-call-0-{i}" for i in range(3))]
        ]
        stopped = Counter(calls)
        await asyncio.sleep(0.2)
        assert calls == stopped, "a call started after the interrupt"
        pause.clear()
        finished = await (await elsewhere.resume("r")).result()

    assert (result.status, result.error) == ("interrupted", "from afar")
    assert latency < 2.0, latency
    assert statuses == ["interrupted"] * 4
    assert (finished.status, finished.output) == ("completed", "root turn 1")


async def test_starting_a_running_session_again_is_refused_and_leaves_it_running(
    opener: Any,
) -> None:
    # The refused start's stream is the running session's: its refusal must not take the
    # running session's queued steps down with it.
    calls: Counter[str] = Counter()
    async with opener() as store, AgentRuntime(build(calls, {"worker": 0.01}), store=store) as rt:
        handle = await rt.execute("root", "go", session_id="r")
        for _ in range(20):
            with pytest.raises(SessionExistsError):
                await rt.execute("root", "again", session_id="r")
            await asyncio.sleep(0.002)
        result = await handle.result()
    assert result.status == "completed"
    assert calls == EVERY_CALL


async def test_a_fresh_run_starts_while_it_is_stored_and_its_writes_follow(opener: Any) -> None:
    # No id or key given: the run does not wait for its creation to land.
    calls: Counter[str] = Counter()
    async with opener() as store, AgentRuntime(build(calls, {}), store=store) as runtime:
        handles = await asyncio.gather(*(runtime.execute("root", "go") for _ in range(5)))
        results = [await handle.result() for handle in handles]
        streams = [[c.sequence async for c in runtime.follow(h.session_id)] for h in handles]
    assert [(r.status, r.output) for r in results] == [("completed", "root turn 1")] * 5
    assert all(sequences == list(range(1, len(sequences) + 1)) for sequences in streams)
    assert sorted(Counter(key.split()[0] for key in calls).items()) == [
        ("model", 5 * 11),
        ("tool", 5 * 6),
    ]
    assert set(calls.values()) == {1}


@pytest.mark.parametrize("fails_after", [0.01, 0.08], ids=["mid-call", "after-steps"])
async def test_a_fresh_run_whose_creation_fails_stops_and_leaves_nothing(
    opener: Any, fails_after: float, caplog: pytest.LogCaptureFixture
) -> None:
    # The database refuses the creation while the run goes on: during the root's first model
    # call, or once the root and its workers have made steps that wait behind the creation.
    calls: Counter[str] = Counter()
    async with (
        opener() as store,
        AgentRuntime(build(calls, {"root": 0.03}), store=store) as runtime,
    ):
        submit = store.submit

        def creation_fails(batch: Any, *, hold: bool = False) -> asyncio.Future[None]:
            store.submit = submit
            refused: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            failure = StoreError("the database went away")
            asyncio.get_running_loop().call_later(fails_after, refused.set_exception, failure)
            return refused

        store.submit = creation_fails
        with pytest.raises(StoreError, match="went away"):
            await runtime.execute("root", "go")
        await asyncio.sleep(0.1)
        (session_id,) = {key.split()[1].partition("-sub-")[0] for key in calls}
        assert any("-sub-" in key for key in calls) == (fails_after > 0.03)
        assert not runtime.trees
        with pytest.raises(SessionNotFoundError):
            await store.get_session(session_id)
        with pytest.raises(StreamNotFoundError):
            await store.get_stream(session_id)
        # The tree is stopped: no call starts once the failure is known.
        stopped = Counter(calls)
        await asyncio.sleep(0.1)
        assert calls == stopped
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_stale_owner_never_repeats_what_the_new_owner_did(
    shared_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process paused past its lease (its model call in flight) wakes after another server
    took the session over and finished it: it starts no tool and writes nothing."""
    calls: Counter[str] = Counter()
    gate = asyncio.Event()

    class Side(BaseModel):
        n: int

    @define_tool("side", description="A side effect.", input_schema=Side)
    async def side(input: Side, ctx: ToolContext[Any]) -> str:
        calls[f"side {ctx.session_id} {ctx.tool_call_id}"] += 1
        return "done"

    class Gated(Model):
        async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
            turn = sum(m.role == "assistant" for m in request.messages)
            calls[f"model {request.session_id} {turn}"] += 1
            if turn == 0 and calls["model r 0"] == 1:
                await gate.wait()  # the paused process
            if turn == 0:
                yield ToolCallReady(ToolCall("side", {"n": 1}))
            else:
                yield TextDelta("finished")

    registry = AgentRegistry([define_agent("root", tools=[side], model=Gated())])
    async with (
        create_store(shared_url) as here,
        create_store(shared_url) as there,
        AgentRuntime(registry, store=here, owner_id="stale", takeover_interval=None) as stale,
    ):
        handle = await stale.execute("root", "go", session_id="r")
        await until(lambda: calls["model r 0"] == 1)
        await here.renew_leases("stale", ["r"], -1)  # its lease lapses while it is paused
        async with AgentRuntime(registry, store=there, owner_id="heir", takeover_interval=0.05):
            await until_status(there, "r", "completed")
        # The paused process wakes: its clock has moved on past the lease.
        clock = time.monotonic() + 3600
        monkeypatch.setattr("app.runtime.tree.monotonic", lambda: clock)
        monkeypatch.setattr("app.runtime.trees.monotonic", lambda: clock)
        gate.set()
        with pytest.raises(LifecycleError):
            await asyncio.wait_for(handle.result(), 10)
        record = await here.get_session("r")
    assert calls == Counter({"model r 0": 2, "model r 1": 1, "side r call-0-0": 1})
    assert (record.status, record.output) == ("completed", "finished")


async def test_a_step_redone_otherwise_after_a_crash_ends_the_calls_it_left_open(
    opener: Any,
) -> None:
    """The dead process streamed a step's call and died before the step was saved; the model
    answers the redone step otherwise. The old call ends, saying the step runs again, and
    the new one, which the model gave the same id, gets an id of its own."""
    answers = iter([{"seconds": 30.0}, {"seconds": 0.0}])

    class Nap(BaseModel):
        seconds: float

    @define_tool("nap", description="Sleep.", input_schema=Nap)
    async def nap(input: Nap, ctx: ToolContext[Any]) -> str:
        await asyncio.sleep(input.seconds)
        return "rested"

    def model(request: ModelRequest) -> ModelResponse:
        if any(m.role == "tool" for m in request.messages):
            return ModelResponse(text="done")
        return ModelResponse(tool_calls=[ToolCall("nap", next(answers), id="x")])

    registry = AgentRegistry([define_agent("napper", tools=[nap], model=FunctionModel(model))])
    async with (
        opener() as store,
        AgentRuntime(registry, store=store, lease_ms=SHORT_LEASE, takeover_interval=None) as doomed,
    ):
        await doomed.execute("napper", "go", session_id="n")
        await until_chunk(store, "n", "tool_start")
        # Leaving the block stops the runtime as a crash would: nothing more is written.
    async with (
        opener() as store,
        AgentRuntime(registry, store=store, takeover_interval=0.05) as heir,
    ):
        await until_status(store, "n", "completed")
        chunks = [chunk async for chunk in heir.follow("n")]
        messages = await store.load_messages("n")

    # The heir says the step runs again before it streams the step anew.
    assert [line.split(" ", 1)[1] for line in snapshot(chunks)[:3]] == [
        'n tool_start nap#x {"seconds":30.0}',
        "n step_redo step 1 takeover",
        "n tool_end nap#x error='The process running this call stopped before its step was "
        "saved: the step runs again'",
    ]
    calls = [(c.tool_call_id, c.arguments) for c in chunks if isinstance(c, ToolStartChunk)]
    ends = [(c.tool_call_id, c.error) for c in chunks if isinstance(c, ToolEndChunk)]
    assert calls == [("x", {"seconds": 30.0}), ("call-0-0", {"seconds": 0.0})]
    assert ends == [("x", STALE_CALL), ("call-0-0", None)]
    (response, *_) = [m for m in messages if isinstance(m, AssistantMessage)]
    (call,) = response.tool_calls
    assert (call.id, call.original_id) == ("call-0-0", "x")
    check_invariants(chunks)
    check_tool_calls(chunks, "completed")


def napper(answers: list[float]) -> AgentRegistry:
    """An agent whose model asks, until a tool answers, for one `nap` call with id "x" (the
    seconds `answers` gives, one per model call)."""
    seconds = iter(answers)

    class Nap(BaseModel):
        seconds: float

    @define_tool("nap", description="Sleep.", input_schema=Nap)
    async def nap(input: Nap, ctx: ToolContext[Any]) -> str:
        await asyncio.sleep(input.seconds)
        return "rested"

    def model(request: ModelRequest) -> ModelResponse:
        if any(m.role == "tool" for m in request.messages):
            return ModelResponse(text="done")
        return ModelResponse(tool_calls=[ToolCall("nap", {"seconds": next(seconds)}, id="x")])

    return AgentRegistry([define_agent("napper", tools=[nap], model=FunctionModel(model))])


async def test_a_call_a_dead_process_left_open_ends_in_its_own_step_when_the_heir_stops_at_once(
    opener: Any,
) -> None:
    """Interrupted while nobody ran it, the tree taken over stops before its step runs again:
    the call the dead process left open ends in the step that announced it, not the step
    the stopped session counts."""
    registry = napper([30.0])
    async with (
        opener() as store,
        AgentRuntime(registry, store=store, lease_ms=SHORT_LEASE, takeover_interval=None) as doomed,
    ):
        await doomed.execute("napper", "go", session_id="n")
        await until_chunk(store, "n", "tool_start")
    async with opener() as store:
        await store.set_interrupt_flag("n", "stop")
        async with AgentRuntime(registry, store=store, takeover_interval=0.05) as heir:
            await until_status(store, "n", "interrupted")
            chunks = [chunk async for chunk in heir.follow("n")]

    steps = [(c.type, c.tool_call_id, c.step) for c in chunks if isinstance(c, ToolStartChunk)]
    steps += [(c.type, c.tool_call_id, c.step) for c in chunks if isinstance(c, ToolEndChunk)]
    assert steps == [("tool_start", "x", 1), ("tool_end", "x", 1)]
    check_tool_calls(chunks, "interrupted")


async def test_a_step_redone_otherwise_after_an_interrupt_gives_its_call_an_id_of_its_own(
    opener: Any,
) -> None:
    """An interrupt ends a step's call in the stream and drops the step; resumed, the model
    makes another call under the same id: it gets an id of its own, as the ended call keeps
    its id."""
    registry = napper([30.0, 0.0])
    async with opener() as store, AgentRuntime(registry, store=store) as runtime:
        await runtime.execute("napper", "go", session_id="n")
        await until_chunk(store, "n", "tool_start")
        await runtime.interrupt("n", "stop")
        await until_status(store, "n", "interrupted")
        handle = await runtime.resume("n")
        await asyncio.wait_for(handle.result(), 10)
        chunks = [chunk async for chunk in runtime.follow("n")]

    calls = [(c.tool_call_id, c.arguments) for c in chunks if isinstance(c, ToolStartChunk)]
    assert calls == [("x", {"seconds": 30.0}), ("call-0-0", {"seconds": 0.0})]
    check_invariants(chunks)
    check_tool_calls(chunks, "completed")


async def test_an_interrupt_a_failed_takeover_read_is_honoured_by_the_next_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reading the interrupt flag clears it: a takeover that read it and then failed (the
    store out of reach) raises it again, so the takeover after it stops the tree."""
    registry = napper([30.0, 30.0])
    async with MemoryStore() as store:
        async with AgentRuntime(
            registry, store=store, lease_ms=SHORT_LEASE, takeover_interval=None
        ) as doomed:
            await doomed.execute("napper", "go", session_id="n")
            await until_chunk(store, "n", "tool_start")
        await store.set_interrupt_flag("n", "stop")
        read_chunks = store.read_chunks
        failures = [StoreUnavailableError("down (test)")]

        async def flaky(*args: Any, **kwargs: Any) -> Any:
            if failures:
                raise failures.pop()
            return await read_chunks(*args, **kwargs)

        monkeypatch.setattr(store, "read_chunks", flaky)
        heir = AgentRuntime(registry, store=store, lease_ms=SHORT_LEASE, takeover_interval=0.05)
        async with heir:
            await until_status(store, "n", "interrupted")
        assert not failures


async def until_chunk(store: StateStore, stream_id: str, chunk_type: str) -> None:
    for _ in range(500):
        chunks = await store.read_chunks(stream_id)
        if any(chunk.type == chunk_type for chunk in chunks):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"no {chunk_type} in {stream_id}")


async def test_children_a_dead_process_left_running_under_a_paused_root_end_on_takeover(
    opener: Any,
) -> None:
    """The root paused and its child was still stopping when the process died: nothing will
    run the child again, so the takeover ends it as the pause would have (to start afresh on
    resume), and the stream ends paused, instead of the tree being found orphaned forever."""
    registry = build(Counter(), {})
    dead = now_ms() - 60_000
    root = SessionRecord(
        session_id="r",
        agent_type="root",
        stream_id="r",
        status="paused_awaiting_client",
        created_at=dead,
        updated_at=dead,
        owner_id="dead",
        lease_expires_at=dead,
    )
    child = dataclasses.replace(
        root,
        session_id="r-sub-call-0-0",
        agent_type="worker",
        status="running",
        parent_session_id="r",
        owner_id=None,
        lease_expires_at=None,
    )
    ref = SubSessionRef(
        sub_session_id=child.session_id,
        agent_type="worker",
        parent_tool_call_id="call-0-0",
        status="running",
        started_at=dead,
    )
    async with opener() as store:
        await store.commit(
            WriteBatch(
                new_sessions=[root, child],
                refs=[RefUpsert("r", ref)],
                streams=[StreamUpdate("r", "running")],
            )
        )
        async with AgentRuntime(registry, store=store, takeover_interval=0.05):
            for _ in range(200):
                if (await store.get_stream("r")).status != "running":
                    break
                await asyncio.sleep(0.01)
        left = await store.get_session(child.session_id)
        (ended,) = await store.get_sub_session_refs("r")
        assert (await store.get_stream("r")).status == "paused_awaiting_client"
        assert (left.status, left.failure_reason) == ("failed", "parent_suspended")
        assert ended.status == "failed"
        assert await store.orphaned_trees() == []
