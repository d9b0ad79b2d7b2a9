"""SIGKILL of the server running a tree with parallel children, then a restart (or, on
PostgreSQL, a second server taking over): the run completes, no model or tool call whose result
was committed runs twice, and the stream is whole.

What was committed at the kill is read from the database while no server runs the session; the
agents log every call (with their process id) to a file, so the calls made before the kill can be
told from those made after it, and the ones in flight at the kill from the committed ones.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from app.protocol import (
    AssistantMessage,
    Chunk,
    OutputChunk,
    SubagentEndChunk,
    SubagentStartChunk,
    TextDeltaChunk,
    ToolEndChunk,
    ToolMessage,
    ToolStartChunk,
)
from app.store import create_store
from tests.e2e.agents import EXPECTED_OUTPUT, expected_calls
from tests.e2e.conftest import (
    Read,
    ServerProcess,
    loopback_client,
    open_cluster,
    read_stream,
    wait_status,
)
from tests.e2e.streams import check_frames, check_sequences, expected_stories

pytestmark = pytest.mark.slow

ROOT = "k1"
FAST_TAKEOVER = {"LEASE_SECONDS": "2", "TAKEOVER_INTERVAL": "0.25"}
"""A second server may take a session over 2 s after its owner last renewed the lease."""


@dataclass
class AtKill:
    """What the store held once the killed server was gone."""

    last_sequence: int
    calls: set[tuple[str, str, str]] = field(default_factory=set)
    """Model calls (session, turn) and tool calls (session, call id) whose results are stored."""
    results: set[tuple[str, str]] = field(default_factory=set)
    """(session, tool call id) of every stored tool result."""
    completed: set[str] = field(default_factory=set)
    statuses: dict[str, str] = field(default_factory=dict)


async def read_store(database_url: str, *, owner: str) -> AtKill:
    """The tree's committed state, checked to be all from before anyone took the session over.

    Read in a thread with a loop of its own: a first store opened in a process imports and sets
    up enough to stall the test's event loop for a tenth of a second."""
    return await asyncio.to_thread(asyncio.run, _read_store(database_url, owner=owner))


async def _read_store(database_url: str, *, owner: str) -> AtKill:
    async with create_store(database_url) as store:
        sessions = [ROOT]
        for session_id in sessions:
            sessions += [ref.sub_session_id for ref in await store.get_sub_session_refs(session_id)]
        state = AtKill((await store.get_stream(ROOT)).last_sequence)
        for session_id in sessions:
            record = await store.get_session(session_id)
            state.statuses[session_id] = record.status
            if record.status == "completed":
                state.completed.add(session_id)
            turns = 0
            for message in await store.load_messages(session_id):
                if isinstance(message, AssistantMessage):
                    state.calls.add(("model", session_id, str(turns)))
                    turns += 1
                elif isinstance(message, ToolMessage):
                    state.calls.add(("tool", session_id, message.tool_call_id))
                    state.results.add((session_id, message.tool_call_id))
        holder = (await store.get_session(ROOT)).owner_id
    assert holder == owner, f"{holder} took the session over while the store was being read"
    return state


def keyed(chunks: list[Chunk]) -> Counter[tuple[str, str, str]]:
    """How often each call's chunks, and each agent's output, occur."""
    counts: Counter[tuple[str, str, str]] = Counter()
    for chunk in chunks:
        if isinstance(chunk, ToolStartChunk | ToolEndChunk):
            counts[(chunk.type, chunk.agent_id, chunk.tool_call_id)] += 1
        elif isinstance(chunk, SubagentStartChunk | SubagentEndChunk):
            counts[(chunk.type, chunk.agent_id, chunk.call_id)] += 1
        elif isinstance(chunk, OutputChunk):
            counts[(chunk.type, chunk.agent_id, "")] += 1
    return counts


def texts(chunks: list[Chunk]) -> dict[tuple[str, int], str]:
    """The text each agent streamed in each step."""
    joined: dict[tuple[str, int], str] = {}
    for chunk in chunks:
        if isinstance(chunk, TextDeltaChunk):
            key = (chunk.agent_id, chunk.step)
            joined[key] = joined.get(key, "") + chunk.delta
    return joined


def first_worker_measure(chunk: Chunk) -> bool:
    """A worker's `measure` ended: its result waits for its checker before it is committed."""
    is_worker = chunk.agent_id.count("-sub-") == 1
    return isinstance(chunk, ToolEndChunk) and chunk.tool_name == "measure" and is_worker


def first_checker_output(chunk: Chunk) -> bool:
    """A checker completed: its calls are committed, its worker's and the others' are not."""
    return isinstance(chunk, OutputChunk) and chunk.agent_id.count("-sub-") == 2


def first_worker_output(chunk: Chunk) -> bool:
    """A worker completed, so resuming the lead's step finds it settled."""
    return isinstance(chunk, OutputChunk) and chunk.agent_id.count("-sub-") == 1


@pytest.mark.parametrize(
    ("backend", "takeover", "kill_after"),
    [
        ("sqlite", False, first_worker_measure),
        ("postgres", False, first_checker_output),
        ("postgres", True, first_worker_output),
    ],
    ids=["sqlite-restart", "postgres-restart", "postgres-second-server"],
)
async def test_sigkill_mid_run_then_the_run_completes_exactly(
    tmp_path: Path, backend: str, takeover: bool, kill_after: Callable[[Chunk], bool]
) -> None:
    async with open_cluster(backend, tmp_path) as cluster:
        settings = FAST_TAKEOVER if takeover else {}
        first = await cluster.start("a", SERVER_ID="a", **settings)
        second: ServerProcess | None = None
        if takeover:
            second = await cluster.start("b", SERVER_ID="b", **settings)

        async def kill_when_due(read: Read) -> None:
            if kill_after(read.chunks[-1]):
                await first.kill()

        async with loopback_client(first.url) as client:
            started = await client.post(
                "/start", json={"agentType": "lead", "message": "go", "sessionId": ROOT}
            )
        assert started.status_code == 201, started.text
        live = await read_stream(first.url, ROOT, on_chunk=kill_when_due)
        assert first.process.returncode is not None, "the run ended before the kill"
        assert live.broken is not None, live
        assert live.end is None
        at_kill = await read_store(cluster.database_url, owner="a")

        if second is None:
            second = await cluster.start("a-again", SERVER_ID="a")
        else:
            async with loopback_client(second.url) as client:
                orphan = (await client.get(f"/status/{ROOT}")).json()
            assert orphan["status"] == "running"
        rest = await read_stream(second.url, ROOT, last_event_id=live.last_id)
        done = await wait_status(second.url, ROOT, "completed", timeout=20)
        whole = await read_stream(second.url, ROOT)
        log = cluster.calls()

    # The run completed with the right output.
    assert done["output"] == EXPECTED_OUTPUT, cluster.logs()
    assert [(r["agentType"], r["status"]) for r in done["subSessions"]] == [
        ("worker", "completed")
    ] * 3
    assert at_kill.statuses[ROOT] == "running"
    assert 0 < at_kill.last_sequence < len(whole.chunks)

    # No call whose result was committed ran twice; every other call ran once after the kill.
    expected = set(expected_calls(ROOT))
    committed = at_kill.calls & expected
    before = [(c["kind"], c["session"], c["key"]) for c in log if c["pid"] == first.pid]
    after = [(c["kind"], c["session"], c["key"]) for c in log if c["pid"] == second.pid]
    assert len(before) + len(after) == len(log), "a call from an unknown process"
    assert len(set(before)) == len(before), Counter(before)
    assert committed <= set(before)
    in_flight = set(before) - committed
    assert in_flight, "the kill found no call in flight"
    assert sorted(after) == sorted(expected - committed)

    # The stream is whole: the client that was cut off got exactly the rest from the survivor.
    check_sequences(whole.chunks, whole.ids)
    assert whole.end == rest.end == {"status": "completed"}
    assert len(live.chunks) <= at_kill.last_sequence
    assert live.chunks + rest.chunks == whole.chunks
    check_sequences(rest.chunks, rest.ids, first=len(live.chunks) + 1)

    # Each process's stretch of the stream keeps the order of frames; after the kill, a call is
    # told again only if its result was not committed, and each agent's output comes once.
    before_kill, after_kill = (
        whole.chunks[: at_kill.last_sequence],
        whole.chunks[at_kill.last_sequence :],
    )
    check_frames(before_kill, complete=False)
    check_frames(after_kill, complete=True)
    seen_before, seen_after = keyed(before_kill), keyed(after_kill)
    for key in seen_before | seen_after:
        kind, agent, call = key
        done_at_kill = (
            agent in at_kill.completed if kind == "output" else (agent, call) in at_kill.results
        )
        counts = (seen_before[key], seen_after[key])
        assert counts in ([(1, 0)] if done_at_kill else [(0, 1), (1, 1)]), (key, counts)
    stories = expected_stories(ROOT)
    assert {(k[1], k[2]) for k in seen_before | seen_after if k[0] == "tool_end"} == {
        (agent, line.split("#")[1].split(" ")[0])
        for agent, lines in stories.items()
        for line in lines
        if " tool_end " in line
    }

    # A model call's text is streamed again only if its response was not committed.
    full = {
        (agent, int(line.split(" ")[0])): line.split(" text ", 1)[1]
        for agent, lines in stories.items()
        for line in lines
        if " text " in line
    }
    text_before, text_after = texts(before_kill), texts(after_kill)
    assert set(text_before) | set(text_after) == set(full)
    for (agent, step), text in full.items():
        if ("model", agent, str(step - 1)) in committed:
            assert (text_before.get((agent, step)), text_after.get((agent, step))) == (text, None)
        else:
            assert text.startswith(text_before.get((agent, step), ""))
            assert text_after.get((agent, step)) == text
