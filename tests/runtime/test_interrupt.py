"""Interrupts stop a whole tree mid model stream; resume finishes it without repeating commits;
a run abandoned by its process is taken over and finished by another."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable

import pytest
from pydantic import BaseModel

from app import AgentRegistry, AgentRuntime, create_sub_agent_tool, define_agent
from app.errors import SessionNotFoundError, SessionNotResumableError, SessionRunningError
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
from app.protocol import AssistantMessage, Chunk, ToolEndChunk, ToolMessage, ToolStartChunk
from app.store import MemoryStore, WriteBatch
from tests.support import until, until_status


class Job(BaseModel):
    message: str


class Report(BaseModel):
    report: str


class Streaming(Model):
    """Streams each response word by word, `delays[name]` seconds apart; counts calls."""

    def __init__(
        self,
        name: str,
        calls: Counter[str],
        delays: dict[str, float],
        decide: Callable[[ModelRequest], ModelResponse],
    ) -> None:
        self.agent = name
        self.calls = calls
        self.delays = delays
        self.decide = decide

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.calls[self.agent] += 1
        response = self.decide(request)
        for word in response.text.split():
            await asyncio.sleep(self.delays.get(self.agent, 0))
            yield TextDelta(word + " ")
        for call in response.tool_calls:
            yield ToolCallReady(call)


def results(request: ModelRequest) -> list[object]:
    return [m.result for m in request.messages if isinstance(m, ToolMessage)]


def build_tree(calls: Counter[str], delays: dict[str, float]) -> AgentRegistry:
    """root -> 2 processors in parallel -> 2 leaves each in parallel: 7 sessions."""

    def leaf(request: ModelRequest) -> ModelResponse:
        return ModelResponse(
            text="reading the text very carefully word by word",
            tool_calls=[ToolCall("__finish__", {"report": "leaf ok"})],
        )

    def processor(request: ModelRequest) -> ModelResponse:
        if results(request):
            return ModelResponse(tool_calls=[ToolCall("__finish__", {"report": "processed"})])
        return ModelResponse(
            text="splitting",
            tool_calls=[ToolCall("subagent__leaf", {"message": f"part {i}"}) for i in range(2)],
        )

    def root(request: ModelRequest) -> ModelResponse:
        if results(request):
            return ModelResponse(text="all parts processed")
        return ModelResponse(
            text="delegating",
            tool_calls=[
                ToolCall("subagent__processor", {"message": f"half {i}"}) for i in range(2)
            ],
        )

    leaf_agent = define_agent(
        "leaf", output_schema=Report, model=Streaming("leaf", calls, delays, leaf)
    )
    processor_agent = define_agent(
        "processor",
        output_schema=Report,
        tools=[create_sub_agent_tool(leaf_agent, Job)],
        model=Streaming("processor", calls, delays, processor),
    )
    root_agent = define_agent(
        "root",
        tools=[create_sub_agent_tool(processor_agent, Job)],
        model=Streaming("root", calls, delays, root),
    )
    return AgentRegistry([root_agent])


TREE = [
    "r",
    "r-sub-call-0-0",
    "r-sub-call-0-1",
    "r-sub-call-0-0-sub-call-0-0",
    "r-sub-call-0-0-sub-call-0-1",
    "r-sub-call-0-1-sub-call-0-0",
    "r-sub-call-0-1-sub-call-0-1",
]


async def test_interrupt_stops_the_whole_tree_mid_stream_and_resume_finishes_it() -> None:
    calls: Counter[str] = Counter()
    delays = {"root": 0.001, "processor": 0.001, "leaf": 0.2}
    async with AgentRuntime(build_tree(calls, delays)) as runtime:
        handle = await runtime.execute("root", "process everything", session_id="r")
        await until(lambda: calls["leaf"] == 4)
        await asyncio.sleep(0.3)  # every leaf is now part-way through streaming its text
        started = time.perf_counter()
        assert await runtime.interrupt("r", "user clicked Stop") == "running"
        result = await handle.result()
        latency = time.perf_counter() - started
        before = Counter(calls)
        await asyncio.sleep(0.3)
        assert calls == before, "a model call started after the interrupt"

        statuses = {sid: (await runtime.status(sid)).status for sid in TREE}
        refs = [
            (ref.sub_session_id, ref.status)
            for sid in TREE[:3]
            for ref in (await runtime.status(sid)).sub_sessions
        ]
        first_segment = [chunk async for chunk in runtime.follow("r")]
        leaf_messages = await runtime.store.load_messages(TREE[3])

        assert (result.status, result.error) == ("interrupted", "user clicked Stop")
        assert latency < 0.1, latency
        assert set(statuses.values()) == {"interrupted"}, statuses
        assert refs == [(sid, "interrupted") for sid in TREE[1:]]
        # Every call the interrupt cut short ends in the stream (DESIGN §10), before its
        # session's `interrupted`; the ends of the sessions come leaves first.
        ends = [c for c in first_segment if c.type in ("tool_start", "tool_end", "interrupted")]
        opened: set[tuple[str, str]] = set()
        for chunk in ends:
            if isinstance(chunk, ToolStartChunk):
                opened.add((chunk.agent_id, chunk.tool_call_id))
            elif isinstance(chunk, ToolEndChunk):
                opened.discard((chunk.agent_id, chunk.tool_call_id))
            else:
                assert not {agent for agent, _ in opened} & {chunk.agent_id}, chunk
        assert not opened, opened
        stops = [c for c in first_segment if c.type != "tool_end"]
        tail = [(c.agent_id, c.type) for c in stops[-7:]]
        assert sorted(tail[:4]) == [(sid, "interrupted") for sid in TREE[3:]]
        assert sorted(tail[4:6]) == [(sid, "interrupted") for sid in TREE[1:3]]
        assert tail[6] == ("r", "interrupted")
        assert any(c.type == "text_delta" and c.agent_id == TREE[3] for c in first_segment)
        # The leaf's cut-off response is not a committed step.
        assert [m.role for m in leaf_messages] == ["user"]
        assert (await runtime.status(TREE[3])).step_count == 0

        delays["leaf"] = 0
        resumed = await runtime.resume("r")
        final = await resumed.result()
        whole = [chunk async for chunk in runtime.follow("r")]

    assert (final.status, final.output) == ("completed", "all parts processed ")
    assert [c.sequence for c in whole] == list(range(1, len(whole) + 1))
    assert whole[: len(first_segment)] == first_segment
    # Committed responses were not asked again: the root and processors made one call each more,
    # the leaves re-made only the calls the interrupt cut short.
    assert calls == {"root": 2, "processor": 4, "leaf": 8}


async def test_interrupting_a_stopped_session_changes_nothing() -> None:
    calls: Counter[str] = Counter()
    async with AgentRuntime(build_tree(calls, {})) as runtime:
        done = await (await runtime.execute("root", "go", session_id="r")).result()
        assert done.status == "completed"
        assert await runtime.interrupt("r", "too late") == "completed"
        assert await runtime.store.check_interrupt_flag("r") is None
        assert (await runtime.status("r")).status == "completed"
        with pytest.raises(SessionNotFoundError):
            await runtime.interrupt("ghost")


async def test_resume_rules() -> None:
    calls: Counter[str] = Counter()
    delays = {"leaf": 0.05}
    async with AgentRuntime(build_tree(calls, delays)) as runtime:
        handle = await runtime.execute("root", "go", session_id="r")
        with pytest.raises(SessionRunningError):
            await runtime.resume("r")
        await until(lambda: calls["leaf"] > 0)
        with pytest.raises(SessionNotResumableError, match="is a sub-agent: resume its root"):
            await runtime.resume(TREE[1])
        await handle.result()
        with pytest.raises(SessionNotResumableError, match="continue it with a new message"):
            await runtime.resume("r")
        with pytest.raises(SessionNotFoundError):
            await runtime.resume("ghost")


async def test_a_finished_session_continues_with_a_new_turn() -> None:
    seen: list[int] = []

    class Echo(Model):
        async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
            seen.append(len(request.messages))
            yield TextDelta(
                f"turn {sum(isinstance(m, AssistantMessage) for m in request.messages) + 1}"
            )

    agent = define_agent("echo", model=Echo(), max_steps=1)
    async with AgentRuntime(AgentRegistry([agent])) as runtime:
        first = await (await runtime.execute("echo", "one", session_id="e")).result()
        second = await (await runtime.resume("e", "two")).result()
        status = await runtime.status("e")
        chunks: list[Chunk] = [c async for c in runtime.follow("e")]
    assert (first.output, second.output) == ("turn 1", "turn 2")
    assert seen == [1, 3]
    assert (status.status, status.step_count) == ("completed", 1)
    assert [c.type for c in chunks] == ["text_delta", "output", "text_delta", "output"]


async def test_a_run_abandoned_by_its_process_is_taken_over() -> None:
    calls: Counter[str] = Counter()
    delays = {"leaf": 0.1}
    registry = build_tree(calls, delays)
    async with MemoryStore() as store:
        async with AgentRuntime(
            registry, store=store, lease_ms=300, takeover_interval=None
        ) as dead:
            await dead.execute("root", "go", session_id="r")
            await until(lambda: calls["leaf"] == 4)
        # The first runtime stopped as if its process died: the tree is still `running`.
        assert (await store.get_session("r")).status == "running"
        committed = Counter(calls)
        delays["leaf"] = 0
        async with AgentRuntime(registry, store=store, takeover_interval=0.05) as heir:
            await until_status(store, "r", "completed")
            status = await heir.status("r")
            chunks = [chunk async for chunk in heir.follow("r")]

    assert status.output == "all parts processed "
    assert [c.sequence for c in chunks] == list(range(1, len(chunks) + 1))
    # Only the leaf calls in flight when the first process stopped were made again.
    assert committed == {"root": 1, "processor": 2, "leaf": 4}
    assert calls == {"root": 2, "processor": 4, "leaf": 8}


class SlowCommitStore(MemoryStore):
    """Applies a commit at once, then takes a while to answer, as a networked store does."""

    def submit(self, batch: WriteBatch, *, hold: bool = False) -> asyncio.Future[None]:
        return asyncio.ensure_future(self._answer_late(super().submit(batch, hold=hold)))

    async def _answer_late(self, applied: asyncio.Future[None]) -> None:
        await applied
        await asyncio.sleep(0.003)


@pytest.mark.parametrize("delay", [0.0, 0.004, 0.011, 0.023, 0.047, 0.09])
async def test_an_interrupt_landing_during_a_commit_still_stops_cleanly(delay: float) -> None:
    calls: Counter[str] = Counter()
    delays = {"root": 0.002, "processor": 0.002, "leaf": 0.002}
    async with (
        SlowCommitStore() as store,
        AgentRuntime(build_tree(calls, delays), store=store) as runtime,
    ):
        handle = await runtime.execute("root", "go", session_id="r")
        await asyncio.sleep(delay)
        await runtime.interrupt("r")
        stopped = await handle.result()
        assert stopped.status in ("interrupted", "completed")
        statuses = {
            (await store.get_session(sid)).status for sid in TREE if await exists(store, sid)
        }
        assert "running" not in statuses
        if stopped.status == "interrupted":
            final = await (await runtime.resume("r")).result()
            assert (final.status, final.output) == ("completed", "all parts processed ")
        chunks = [chunk async for chunk in runtime.follow("r")]
    assert [c.sequence for c in chunks] == list(range(1, len(chunks) + 1))


async def exists(store: MemoryStore, session_id: str) -> bool:
    try:
        await store.get_session(session_id)
    except SessionNotFoundError:
        return False
    return True


async def test_a_step_an_interrupt_cut_opens_with_step_redo_on_resume() -> None:
    model = FunctionModel(
        lambda _: ModelResponse(text="A long answer, word by word, " * 4), latency=1.0
    )
    agent = define_agent("talker", model=model)
    async with AgentRuntime(AgentRegistry([agent]), flush_delay=0.001) as runtime:
        await runtime.execute(agent, "go", session_id="s")
        for _ in range(500):
            if await runtime.store.read_chunks("s"):
                break
            await asyncio.sleep(0.01)
        await runtime.interrupt("s", "wait")
        await until_status(runtime.store, "s", "interrupted")
        resumed = await runtime.resume("s")
        assert (await resumed.result()).status == "completed"
        # A new turn after a completed one begins afresh: no redo of its step 1.
        again = await runtime.resume("s", "and now?")
        assert (await again.result()).status == "completed"
        chunks = [chunk async for chunk in runtime.follow("s")]

    kinds = [chunk.type for chunk in chunks]
    assert kinds.count("step_redo") == 1
    redo = chunks[kinds.index("step_redo")]
    assert (redo.step, getattr(redo, "reason", None)) == (1, "resume")
    assert kinds[kinds.index("step_redo") - 1] == "interrupted"
