"""Test helpers: readable chunk snapshots and the stream invariants every run must keep."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from typing import Any, assert_never

from app.protocol import (
    BaseChunk,
    Chunk,
    ErrorChunk,
    InterruptedChunk,
    OutputChunk,
    StepRedoChunk,
    SubagentEndChunk,
    SubagentStartChunk,
    TextDeltaChunk,
    ToolEndChunk,
    ToolPendingChunk,
    ToolStartChunk,
)
from app.runtime.children import DROPPED, WAITS_FOR_CLIENT, failure_result
from app.store import StateStore


def _short(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def describe(chunk: Chunk) -> str:
    """One chunk as `sequence agent type detail`, without its timestamp."""
    if isinstance(chunk, TextDeltaChunk):
        detail = repr(chunk.delta)
    elif isinstance(chunk, ToolStartChunk):
        detail = f"{chunk.tool_name}#{chunk.tool_call_id} {_short(chunk.arguments)}"
    elif isinstance(chunk, ToolEndChunk):
        outcome = f"error={chunk.error!r}" if chunk.error else _short(chunk.result)
        detail = f"{chunk.tool_name}#{chunk.tool_call_id} {outcome}"
    elif isinstance(chunk, SubagentStartChunk):
        detail = f"{chunk.sub_agent_type} {chunk.sub_session_id}"
    elif isinstance(chunk, SubagentEndChunk):
        detail = f"{chunk.sub_agent_type} {chunk.sub_session_id} {_short(chunk.result)}"
    elif isinstance(chunk, OutputChunk):
        detail = _short(chunk.output)
    elif isinstance(chunk, ErrorChunk):
        detail = repr(chunk.error)
    elif isinstance(chunk, InterruptedChunk):
        detail = repr(chunk.reason)
    elif isinstance(chunk, ToolPendingChunk):
        detail = f"{chunk.tool_name}#{chunk.tool_call_id} {chunk.reason}"
    elif isinstance(chunk, StepRedoChunk):
        detail = f"step {chunk.step} {chunk.reason}"
    else:
        assert_never(chunk)
    return f"{chunk.sequence} {chunk.agent_id} {chunk.type} {detail}"


def snapshot(chunks: Sequence[Chunk]) -> list[str]:
    """The whole stream as lines, for `assert snapshot(chunks) == [...]`."""
    return [describe(chunk) for chunk in chunks]


def check_invariants(chunks: Sequence[BaseChunk]) -> None:
    """Sequences are 1..n without gap, and every sub-agent call is framed in order:
    tool_start -> subagent_start -> the child's chunks (and its descendants') -> subagent_end ->
    tool_end, all from the right agents (a persistent child started by a companion call, or a
    background `subagent` session, may outlive the call: its tool_end may come before its
    subagent_end). A child that runs again
    (after a pause or an interrupt, or a persistent one continued) has a frame per run; each
    of its chunks is in one of them."""
    assert [c.sequence for c in chunks] == list(range(1, len(chunks) + 1)), "sequence gap"
    starts = {}
    background: set[tuple[str, str]] = set()
    frames: dict[str, list[tuple[int, int]]] = {}
    for index, chunk in enumerate(chunks):
        if isinstance(chunk, ToolStartChunk):
            starts[(chunk.agent_id, chunk.tool_call_id)] = index
            if chunk.tool_name.startswith("companion__") or chunk.tool_name == "subagent":
                background.add((chunk.agent_id, chunk.tool_call_id))
    for index, chunk in enumerate(chunks):
        if not isinstance(chunk, SubagentStartChunk):
            continue
        key = (chunk.agent_id, chunk.call_id)
        assert key in starts, f"no tool_start before {describe(chunk)}"
        child = chunk.sub_session_id
        ends = [
            i
            for i, c in enumerate(chunks)
            if i > index and isinstance(c, SubagentEndChunk) and c.sub_session_id == child
        ]
        assert ends, f"no subagent_end for {child}"
        end = ends[0]
        # A persistent child in the background outlives the call that started it.
        after = starts[key] if key in background else end
        tool_ends = [
            i
            for i, c in enumerate(chunks)
            if i > after and isinstance(c, ToolEndChunk) and (c.agent_id, c.tool_call_id) == key
        ]
        if not _paused(chunks[end]):
            assert tool_ends, f"no tool_end after subagent_end of {child}"
        frames.setdefault(child, []).append((index, end))
    # A child started by a companion call may outlive its parent's run: its frame and what is
    # inside it need only be inside the frames from it down.
    detached = {
        c.sub_session_id
        for c in chunks
        if isinstance(c, SubagentStartChunk) and (c.agent_id, c.call_id) in background
    }
    for i, c in enumerate(chunks):
        framing = isinstance(c, SubagentStartChunk | SubagentEndChunk) and (
            c.sub_session_id in detached
        )
        subject = c.sub_session_id if framing else c.agent_id  # type: ignore[attr-defined]
        top = max((d for d in detached if _under(subject, d)), key=len, default="")
        owners = [
            child
            for child in frames
            if _under(subject, child) and _under(child, top) and not (framing and child == subject)
        ]
        for child in owners:
            assert any(start < i < end for start, end in frames[child]), (
                f"{describe(c)} (#{i}) outside the frames of {child}"  # type: ignore[arg-type]
            )


def _under(session_id: str, ancestor: str) -> bool:
    """Whether `session_id` is `ancestor` or below it (any session is below "")."""
    return not ancestor or session_id == ancestor or session_id.startswith(ancestor + "-")


def _paused(chunk: BaseChunk) -> bool:
    """Whether the chunk is the `subagent_end` of a child that paused for the client."""
    return isinstance(chunk, SubagentEndChunk) and chunk.result == failure_result(WAITS_FOR_CLIENT)


def check_tool_calls(chunks: Sequence[BaseChunk], status: str) -> None:
    """Every `tool_start` gets one `tool_end` before the stream ends, and no call starts again
    while it is open, or once it has ended with its result. A call a suspension dropped ends
    saying so and may start again; in a paused stream, the calls that wait for the client (and
    the calls to the children that wait) stay open."""
    open_calls: dict[tuple[str, str], int] = {}
    ended: set[tuple[str, str]] = set()
    for index, chunk in enumerate(chunks):
        if isinstance(chunk, ToolStartChunk):
            key = (chunk.agent_id, chunk.tool_call_id)
            assert key not in open_calls, f"#{index} {describe(chunk)}: started while open"
            assert key not in ended, f"#{index} {describe(chunk)}: started after it ended"
            open_calls[key] = index
        elif isinstance(chunk, ToolEndChunk):
            key = (chunk.agent_id, chunk.tool_call_id)
            assert key in open_calls, f"#{index} {describe(chunk)}: ended, never started"
            del open_calls[key]
            if chunk.error != DROPPED:
                ended.add(key)
    if status == "paused_awaiting_client":
        waiting = {(c.agent_id, c.tool_call_id) for c in chunks if isinstance(c, ToolPendingChunk)}
        paused_children = {
            (c.agent_id, c.call_id)
            for c in chunks
            if isinstance(c, SubagentEndChunk) and _paused(c)
        }
        left = set(open_calls) - waiting - paused_children
    else:
        left = set(open_calls)
    assert not left, f"tool calls never ended: {sorted(left)}"


async def until(condition: Callable[[], bool], *, timeout: float = 10.0) -> None:
    """Wait until `condition()` holds, failing the test after `timeout` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "the condition never held"
        await asyncio.sleep(0.005)


async def until_status(
    store: StateStore, session_id: str, status: str, *, timeout: float = 15.0
) -> None:
    """Wait until the stored session has `status`, failing the test after `timeout` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while (await store.get_session(session_id)).status != status:
        assert asyncio.get_running_loop().time() < deadline, f"{session_id} never became {status}"
        await asyncio.sleep(0.01)
