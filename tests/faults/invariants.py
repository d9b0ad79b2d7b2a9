"""The invariants every scenario must keep once the system is quiescent (DESIGN §2, §3, §9, §10).

- Every session is stopped (completed, failed, interrupted, terminated, paused_awaiting_client),
  or running under a live owner that is making progress (the settle loop in `runner` tells a
  run in progress from one nobody works on).
- A stopped parent has no running child; a child's ref says what the child's record says.
- A root stream whose run stopped has ended (its status is the root's) with the chunk that says
  how (`output`, `error`, `interrupted`, `tool_pending`); sequences run 1..n, no gap or duplicate.
- In a stream that completed, every `tool_start` is followed by its `tool_end`.
- A tool-call id names one call within its session (§3): the same id is never given to two
  different calls in `tool_start` chunks.
- No model or tool call whose result was committed ran again (the ledger).

The stream checks are pure functions of the chunks, so the process-level tests use them on what
they read over SSE.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from app.errors import SessionNotFoundError, StreamNotFoundError
from app.protocol import (
    STOPPED_STATUSES,
    BaseChunk,
    ErrorChunk,
    InterruptedChunk,
    OutputChunk,
    SubagentEndChunk,
    SubSessionRef,
    ToolEndChunk,
    ToolPendingChunk,
    ToolStartChunk,
)
from app.runtime.children import call_result
from app.runtime.outcome import SUSPENDED, stopped_outcome
from app.store import SessionRecord, StateStore
from tests.faults.ledger import Ledger


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken invariant: its kind (for counting) and what exactly broke."""

    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


@dataclass
class Tree:
    """A root and every session reachable through sub-session refs."""

    root: str
    records: dict[str, SessionRecord]
    refs: dict[str, list[SubSessionRef]]

    def running(self) -> list[SessionRecord]:
        """The sessions still `running`."""
        return [r for r in self.records.values() if r.status == "running"]


async def read_tree(store: StateStore, root: str) -> Tree | None:
    """The tree of `root` as stored, or None if the root does not exist."""
    try:
        records = {root: await store.get_session(root)}
    except SessionNotFoundError:
        return None
    refs: dict[str, list[SubSessionRef]] = {}
    queue = [root]
    while queue:
        parent = queue.pop()
        refs[parent] = await store.get_sub_session_refs(parent)
        for ref in refs[parent]:
            if ref.sub_session_id in records:
                continue
            try:
                records[ref.sub_session_id] = await store.get_session(ref.sub_session_id)
            except SessionNotFoundError:
                continue  # a remote child lives on another server
            queue.append(ref.sub_session_id)
    return Tree(root, records, refs)


def check_tree(tree: Tree) -> list[Violation]:
    """Refs agree with their children, and no stopped parent has a running child."""
    found = []
    for parent_id, refs in tree.refs.items():
        parent = tree.records[parent_id]
        for ref in refs:
            child = tree.records.get(ref.sub_session_id)
            if child is None:
                if ref.remote is None:
                    found.append(Violation("missing_child", f"{ref.sub_session_id} has a ref only"))
                continue
            if parent.status in STOPPED_STATUSES and child.status == "running":
                found.append(
                    Violation(
                        "running_child_of_stopped_parent",
                        f"{child.session_id} is running under {parent.session_id} "
                        f"({parent.status}); owner={child.owner_id}",
                    )
                )
            if child.status != ref.status:
                found.append(
                    Violation(
                        "ref_mismatch",
                        f"ref of {child.session_id} says {ref.status}, the session {child.status}",
                    )
                )
    return found


END_CHUNK: dict[str, type[BaseChunk]] = {
    "completed": OutputChunk,
    "failed": ErrorChunk,
    "interrupted": InterruptedChunk,
    "paused_awaiting_client": ToolPendingChunk,
}


def check_stream(chunks: Sequence[BaseChunk], root: str, status: str) -> list[Violation]:
    """The stream's sequences, its ending, its tool frames and its tool-call ids."""
    found = []
    sequences = [chunk.sequence for chunk in chunks]
    if sequences != list(range(1, len(chunks) + 1)):
        gaps = [(a, b) for a, b in zip([0, *sequences], sequences, strict=False) if b != a + 1][:3]
        found.append(Violation("sequence_gap", f"{root}: sequence jumps {gaps}"))
    ending = END_CHUNK.get(status)
    if ending is not None and not any(
        isinstance(chunk, ending) and chunk.agent_id == root for chunk in chunks
    ):
        found.append(
            Violation("missing_end_chunk", f"{root} is {status} but has no {ending.__name__}")
        )
    if status == "completed":
        found += _unclosed_calls(chunks)
    elif status == "paused_awaiting_client":
        # §10: a call dropped by the suspension ends too; only the calls it waits for stay open.
        pending = {(c.agent_id, c.tool_call_id) for c in chunks if isinstance(c, ToolPendingChunk)}
        found += _unclosed_calls(chunks, pending)
    found += _reused_ids(chunks)
    return found


def _unclosed_calls(
    chunks: Sequence[BaseChunk],
    waiting: Collection[tuple[str, str]] = (),
) -> list[Violation]:
    last_start: dict[tuple[str, str, int], int] = {}
    last_end: dict[tuple[str, str, int], int] = {}
    for index, chunk in enumerate(chunks):
        if isinstance(chunk, ToolStartChunk):
            last_start[(chunk.agent_id, chunk.tool_call_id, chunk.step)] = index
        elif isinstance(chunk, ToolEndChunk):
            last_end[(chunk.agent_id, chunk.tool_call_id, chunk.step)] = index
    unclosed = sorted(
        f"{agent}#{call_id}@{step}"
        for (agent, call_id, step), at in last_start.items()
        if last_end.get((agent, call_id, step), -1) < at and (agent, call_id) not in waiting
    )
    if not unclosed:
        return []
    return [Violation("unclosed_tool_call", f"tool_start without tool_end: {unclosed[:4]}")]


def _reused_ids(chunks: Sequence[BaseChunk]) -> list[Violation]:
    # A child dropped by a suspension starts again from scratch on resume: a new session under
    # the same id, its old conversation and subtree deleted (docs/architecture.md, "The
    # cascade"). Its ids are unique within that new life, not across lives; the `subagent_end`
    # that says the child was dropped (`SUSPENDED`) begins the next life of it and its subtree.
    dropped = call_result(stopped_outcome(SUSPENDED)).result
    born: dict[str, int] = {}
    calls: dict[tuple[str, int, str], set[tuple[int, str, str]]] = defaultdict(set)
    for index, chunk in enumerate(chunks):
        if isinstance(chunk, SubagentEndChunk) and chunk.result == dropped:
            born[chunk.sub_session_id] = index
        elif isinstance(chunk, ToolStartChunk):
            life = max(
                (at for root, at in born.items() if _within(chunk.agent_id, root)), default=-1
            )
            arguments = json.dumps(chunk.arguments, sort_keys=True, default=str)
            calls[(chunk.agent_id, life, chunk.tool_call_id)].add(
                (chunk.step, chunk.tool_name, arguments)
            )
    reused = sorted(
        f"{agent}#{call_id}" for (agent, _, call_id), seen in calls.items() if len(seen) > 1
    )
    if not reused:
        return []
    return [Violation("tool_call_id_reused", f"one toolCallId for several calls: {reused[:4]}")]


def _within(session_id: str, root: str) -> bool:
    """Whether `session_id` is `root` or a local descendant of it (`{root}-sub-...`)."""
    return session_id == root or session_id.startswith(f"{root}-")


async def read_all_chunks(store: StateStore, stream_id: str) -> list[BaseChunk]:
    """Every stored chunk of the stream."""
    chunks: list[BaseChunk] = []
    while True:
        page = await store.read_chunks(stream_id, after=len(chunks), limit=1000)
        chunks += page
        if len(page) < 1000:
            return chunks


async def check_quiescent(store: StateStore, tree: Tree, ledger: Ledger) -> list[Violation]:
    """Every invariant but liveness, read from `store` (which must not inject faults)."""
    found = check_tree(tree)
    root = tree.records[tree.root]
    try:
        stream = await store.get_stream(tree.root)
    except StreamNotFoundError:
        return [*found, Violation("missing_stream", f"{tree.root} has no stream")]
    if root.status in STOPPED_STATUSES and stream.status != root.status:
        found.append(
            Violation(
                "stream_not_ended",
                f"{tree.root} is {root.status} but its stream is {stream.status}",
            )
        )
    chunks = await read_all_chunks(store, tree.root)
    if len(chunks) < stream.last_sequence:
        found.append(
            Violation(
                "sequence_gap",
                f"{tree.root}: last sequence {stream.last_sequence}, {len(chunks)} chunks",
            )
        )
    found += check_stream(chunks, tree.root, root.status)
    found += [Violation("repeated_call", str(repeat)) for repeat in ledger.repeated()]
    return found
