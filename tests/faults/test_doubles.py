"""The fault suite's own parts do what they claim: the faulty store keeps the write contract and
is reproducible, the proxy refuses, resets, black-holes and heals, the ledger and the checks
tell a violation from a run that is fine, and a scenario without faults breaks nothing."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from app.errors import StoreError
from app.protocol import (
    AssistantMessage,
    BaseChunk,
    OutputChunk,
    TextDeltaChunk,
    ToolCall,
    ToolEndChunk,
    ToolMessage,
    ToolStartChunk,
    UserMessage,
)
from app.store import (
    ChunkAppend,
    MemoryStore,
    MessageAppend,
    SessionRecord,
    StateStore,
    StreamUpdate,
    WriteBatch,
    now_ms,
)
from tests.faults.faulty_store import FaultConfig, FaultyStore, ReadFault, WriteFault
from tests.faults.invariants import check_stream
from tests.faults.ledger import CallKey, Ledger
from tests.faults.proxy import TcpProxy
from tests.faults.runner import open_bed, run_scenario
from tests.faults.scenario import generate
from tests.faults.tree import Plan

# -- the faulty store ---------------------------------------------------------------------------


def session(session_id: str) -> SessionRecord:
    now = now_ms()
    return SessionRecord(session_id, "a", session_id, "running", now, now)


def text(sequence: int, stream: str = "s") -> TextDeltaChunk:
    return TextDeltaChunk(
        sequence=sequence, agent_id=stream, agent_type="a", step=1, timestamp=0, delta="x"
    )


def creation(stream: str = "s") -> WriteBatch:
    return WriteBatch(
        new_sessions=[session(stream)],
        messages=[MessageAppend(stream, 0, UserMessage(content="hi"))],
        streams=[StreamUpdate(stream, "running")],
    )


def step(index: int, sequence: int, stream: str = "s") -> WriteBatch:
    return WriteBatch(
        messages=[MessageAppend(stream, index, AssistantMessage(content=f"step {index}"))],
        chunks=[ChunkAppend(stream, [text(sequence, stream)])],
    )


@pytest.fixture
async def memory() -> AsyncIterator[MemoryStore]:
    async with MemoryStore() as store:
        yield store


async def faulty(inner: StateStore, **config: Any) -> FaultyStore:
    store = FaultyStore(inner, FaultConfig(seed=7, **config), Ledger(), scope="s")
    await store.__aenter__()
    store.arm()
    return store


async def test_the_same_seed_fails_the_same_operations(memory: MemoryStore) -> None:
    traces = []
    for _ in range(2):
        async with MemoryStore() as inner:
            store = await faulty(inner, write_rate=0.5, write_kinds=(WriteFault.STORE_ERROR,))
            for index in range(1, 30):
                stream = f"s{index}"
                outcome = store.submit(creation(stream))
                await asyncio.gather(outcome, return_exceptions=True)
            traces.append([line.split(" ", 1)[1] for line in store.trace])
            await store.__aexit__(None, None, None)
    assert traces[0] == traces[1]
    assert 5 < len(traces[0]) < 25


async def test_a_slow_write_keeps_its_stream_in_order(memory: MemoryStore) -> None:
    store = await faulty(memory, write_rate=1.0, write_kinds=(WriteFault.SLOW,), max_faults=1)
    await memory.commit(creation())
    first = store.submit(step(1, 1))  # slowed
    second = store.submit(step(2, 2))  # would land first without the wrapper's ordering
    await asyncio.gather(first, second)
    assert [c.sequence for c in await memory.read_chunks("s")] == [1, 2]
    assert store.injected == {"write:slow": 1}


async def test_a_hung_write_fails_at_heal_and_so_do_those_behind_it(memory: MemoryStore) -> None:
    store = await faulty(memory, write_rate=1.0, write_kinds=(WriteFault.HANG,), max_faults=1)
    await memory.commit(creation())
    hung, behind = store.submit(step(1, 1)), store.submit(step(2, 2))
    await asyncio.sleep(0.05)
    assert not hung.done()
    assert not behind.done()
    store.heal()
    results = await asyncio.gather(hung, behind, return_exceptions=True)
    assert [type(result) for result in results] == [StoreError, StoreError]
    assert await memory.read_chunks("s") == []


async def test_a_lost_acknowledgement_lands_but_fails(memory: MemoryStore) -> None:
    store = await faulty(memory, write_rate=1.0, write_kinds=(WriteFault.LOST_ACK,))
    with pytest.raises(StoreError, match="connection lost"):
        await store.commit(creation())
    assert (await memory.get_session("s")).status == "running"
    assert store.ledger.landed_writes == 1


async def test_reads_fail_hang_until_heal_and_a_severed_store_refuses_all(
    memory: MemoryStore,
) -> None:
    await memory.commit(creation())
    store = await faulty(memory, read_rate=1.0, read_kinds=(ReadFault.HANG,))
    read = asyncio.ensure_future(store.get_session("s"))
    await asyncio.sleep(0.05)
    assert not read.done()
    store.heal()
    with pytest.raises(StoreError, match="timed out"):
        await read
    assert (await store.get_session("s")).session_id == "s"
    store.sever()
    with pytest.raises(StoreError, match="gone"):
        await store.get_session("s")
    with pytest.raises(StoreError, match="gone"):
        store.submit(step(1, 1))


async def test_a_frozen_store_waits_and_lists_only_its_scenarios_orphans(
    memory: MemoryStore,
) -> None:
    await memory.commit(creation("s"))
    await memory.commit(creation("other"))
    store = await faulty(memory)
    store.freeze()
    listing = asyncio.ensure_future(store.orphaned_trees())
    await asyncio.sleep(0.05)
    assert not listing.done()
    store.thaw()
    assert [r.session_id for r in await listing] == ["s"]


# -- the proxy ----------------------------------------------------------------------------------


@pytest.fixture
async def echo() -> AsyncIterator[int]:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(100):
            writer.write(data)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()


async def talk(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def echoes(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    writer.write(b"ping")
    try:
        async with asyncio.timeout(0.3):
            return await reader.read(4) == b"ping"
    except (TimeoutError, ConnectionError):
        return False


async def test_the_proxy_black_holes_refuses_resets_and_heals(echo: int) -> None:
    async with TcpProxy("127.0.0.1", echo) as proxy:
        caught = await talk(proxy.port)
        assert await echoes(*caught)
        proxy.blackhole(existing=True, new=False)
        assert not await echoes(*caught), "a black-holed connection answered"
        fresh = await talk(proxy.port)
        assert await echoes(*fresh), "a new connection was black-holed"
        await proxy.heal()
        assert not await echoes(*caught), "a caught connection came back"

        await proxy.refuse()
        with pytest.raises(ConnectionRefusedError):
            await talk(proxy.port)
        await proxy.heal()
        again = await talk(proxy.port)
        assert await echoes(*again)
        proxy.reset()
        try:
            async with asyncio.timeout(1):
                assert await again[0].read(4) == b""
        except ConnectionResetError:
            pass
        for _, writer in (caught, fresh, again):
            writer.close()


# -- the ledger and the checks ------------------------------------------------------------------


def test_the_ledger_tells_a_repeated_committed_call() -> None:
    ledger = Ledger()
    calls = (ToolCall("t", {}, id="call_0"), ToolCall("t", {}, id="call_0"))
    ledger.call("A", CallKey("s", 1))
    ledger.call("A", CallKey("s", 1, 0))
    ledger.landed(
        WriteBatch(
            messages=[
                MessageAppend("s", 1, AssistantMessage(tool_calls=calls)),
                MessageAppend("s", 2, ToolMessage(tool_call_id="call_0", tool_name="t")),
            ]
        )
    )
    ledger.call("B", CallKey("s", 1, 1))  # the second call_0: not committed yet
    assert ledger.repeated() == []
    ledger.call("B", CallKey("s", 1, 0))
    ledger.call("B", CallKey("s", 1))
    assert [str(r) for r in ledger.repeated()] == [
        "tool s@1.0 ran again on node B after its result was committed",
        "model s@1 ran again on node B after its result was committed",
    ]
    ledger.landed(WriteBatch(cleared_messages=["s"]))
    ledger.call("C", CallKey("s", 1))  # started again from scratch: fine
    assert len(ledger.repeated()) == 2


def chunk(kind: type[BaseChunk], sequence: int, **fields: Any) -> BaseChunk:
    base = {"sequence": sequence, "agent_id": "r", "agent_type": "a", "step": 1, "timestamp": 0}
    return kind(**base, **fields)


def test_the_stream_checks_find_gaps_endings_open_calls_and_reused_ids() -> None:
    start = {"tool_name": "t", "arguments": {}}
    fine = [
        chunk(ToolStartChunk, 1, tool_call_id="a", **start),
        chunk(ToolEndChunk, 2, tool_call_id="a", tool_name="t"),
        chunk(OutputChunk, 3, output="done"),
    ]
    assert check_stream(fine, "r", "completed") == []
    broken = [
        chunk(ToolStartChunk, 1, tool_call_id="a", **start),
        chunk(ToolStartChunk, 3, tool_call_id="a", tool_name="t", arguments={"x": 1}),
    ]
    assert sorted(v.kind for v in check_stream(broken, "r", "completed")) == [
        "missing_end_chunk",
        "sequence_gap",
        "tool_call_id_reused",
        "unclosed_tool_call",
    ]


# -- scenarios ----------------------------------------------------------------------------------


def test_a_seed_always_gives_the_same_scenario() -> None:
    assert generate(42) == generate(42)
    assert generate(42) != generate(43)


@pytest.mark.parametrize("backend", ["memory", "sqlite", "postgres"])
async def test_scenarios_without_faults_keep_every_invariant(backend: str, tmp_path: Path) -> None:
    # The checks find nothing where nothing goes wrong: no faults, unique ids, a crash and a
    # restart or an interrupt and a resume at most.
    async with open_bed(backend, tmp_path) as bed:
        for seed in (2, 4, 8, 10, 15):
            scenario = generate(seed)
            calm = dataclasses.replace(
                scenario,
                plan=Plan(seed=seed, latency=0.01),
                faults=FaultConfig(seed=seed),
                first_message="go",
                actions=tuple(
                    a for a in scenario.actions if a.kind in ("crash_restart", "interrupt")
                ),
            )
            report = await run_scenario(bed, calm)
            assert report.violations == [], str(report)
