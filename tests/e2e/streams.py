"""What a whole stream of the e2e tree must look like: frames, per-agent stories, sequences."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from app.protocol import (
    Chunk,
    OutputChunk,
    SubagentEndChunk,
    SubagentStartChunk,
    TextDeltaChunk,
    ToolEndChunk,
    ToolStartChunk,
)
from tests.e2e.agents import JOBS


def _short(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def check_sequences(chunks: Sequence[Chunk], ids: Sequence[str], first: int = 1) -> None:
    """Sequences rise by exactly 1 from `first`, and each SSE id is its chunk's sequence."""
    assert [c.sequence for c in chunks] == list(range(first, first + len(chunks))), [
        c.sequence for c in chunks
    ]
    assert list(ids) == [str(c.sequence) for c in chunks]


def check_frames(chunks: Sequence[Chunk], *, complete: bool) -> None:
    """The order every process's stretch of a stream keeps: an agent's tool calls open with
    `tool_start` and close with one `tool_end`; a sub-agent call opens `subagent_start` inside its
    tool call, the child (and its descendants) write only inside that frame, and
    `subagent_end` closes it before the call's `tool_end`; an agent's `output` comes with no call
    of its open. `complete=False` allows frames still open at the end (a stream cut by a crash)."""
    calls: set[tuple[str, str]] = set()
    frames: dict[str, tuple[str, str]] = {}
    root = chunks[0].agent_id.split("-sub-")[0] if chunks else ""
    for index, chunk in enumerate(chunks):
        where = f"#{index} seq {chunk.sequence} {chunk.agent_id} {chunk.type}"
        agent = chunk.agent_id
        assert agent == root or agent in frames, f"{where}: written outside its frame"
        if isinstance(chunk, ToolStartChunk):
            key = (agent, chunk.tool_call_id)
            assert key not in calls, f"{where}: started twice"
            calls.add(key)
        elif isinstance(chunk, SubagentStartChunk):
            assert (agent, chunk.call_id) in calls, f"{where}: no open tool_start"
            assert chunk.sub_session_id not in frames, f"{where}: frame opened twice"
            frames[chunk.sub_session_id] = (agent, chunk.call_id)
        elif isinstance(chunk, SubagentEndChunk):
            child = chunk.sub_session_id
            assert frames.get(child) == (agent, chunk.call_id), f"{where}: frame not open"
            assert not [f for f in frames if f.startswith(child + "-")], f"{where}: child open"
            assert not [c for c in calls if c[0] == child], f"{where}: child call open"
            del frames[child]
        elif isinstance(chunk, ToolEndChunk):
            key = (agent, chunk.tool_call_id)
            assert key in calls, f"{where}: no open tool_start"
            assert key not in frames.values(), f"{where}: sub-agent frame still open"
            calls.discard(key)
        elif isinstance(chunk, OutputChunk):
            assert not [c for c in calls if c[0] == agent], f"{where}: calls still open"
    if complete:
        assert not calls, f"calls never ended: {sorted(calls)}"
        assert not frames, f"frames never closed: {sorted(frames)}"


def story(chunks: Sequence[Chunk], agent_id: str) -> list[str]:
    """One agent's chunks as lines `step type detail`, its text deltas of a step joined."""
    lines: list[str] = []
    text_step: int | None = None
    for chunk in chunks:
        if chunk.agent_id != agent_id:
            continue
        if isinstance(chunk, TextDeltaChunk):
            if text_step == chunk.step and lines:
                lines[-1] += chunk.delta
            else:
                lines.append(f"{chunk.step} text {chunk.delta}")
            text_step = chunk.step
            continue
        text_step = None
        if isinstance(chunk, ToolStartChunk):
            detail = f"{chunk.tool_name}#{chunk.tool_call_id} {_short(chunk.arguments)}"
        elif isinstance(chunk, ToolEndChunk):
            detail = f"{chunk.tool_name}#{chunk.tool_call_id} {_short(chunk.result)} {chunk.error}"
        elif isinstance(chunk, SubagentStartChunk | SubagentEndChunk):
            detail = f"{chunk.sub_agent_type} {chunk.sub_session_id}"
        elif isinstance(chunk, OutputChunk):
            detail = _short(chunk.output)
        else:
            detail = "?"
        lines.append(f"{chunk.step} {chunk.type} {detail}")
    return lines


def expected_stories(root: str) -> dict[str, list[str]]:
    """Each agent's story in a run of `lead` as `root` without a crash. The lead's children end
    in whatever order they finish, so its lines between the starts and the report are sorted."""
    stories: dict[str, list[str]] = {}
    lead_ends: list[str] = []
    lead = ["1 text splitting the work in three"]
    for index, (task, size) in enumerate(JOBS):
        job = _short({"size": size, "task": task})
        worker = f"{root}-sub-call-0-{index}"
        checker = f"{worker}-sub-call-0-1"
        score = len(task) * size
        lead.append(f"1 tool_start subagent__worker#call-0-{index} {job}")
        lead_ends += [
            f"1 subagent_end worker {worker}",
            f"1 tool_end subagent__worker#call-0-{index} "
            + _short({"score": score * 3, "task": task})
            + " None",
        ]
        stories[worker] = [
            f"1 text working on {task} of size {size}",
            f"1 tool_start measure#call-0-0 {_short({'size': size, 'text': task})}",
            f"1 tool_start subagent__checker#call-0-1 {job}",
            f"1 subagent_start checker {checker}",
            f"1 tool_end measure#call-0-0 {score} None",
            f"1 subagent_end checker {checker}",
            "1 tool_end subagent__checker#call-0-1 "
            + _short({"score": score * 2, "task": task})
            + " None",
            f"2 output {_short({'score': score * 3, 'task': task})}",
        ]
        stories[checker] = [
            f"1 text checking {task} twice over",
            f"1 tool_start measure#call-0-0 {_short({'size': size, 'text': task * 2})}",
            f"1 tool_end measure#call-0-0 {score * 2} None",
            f"2 output {_short({'score': score * 2, 'task': task})}",
        ]
    lead += [f"1 subagent_start worker {root}-sub-call-0-{i}" for i in range(len(JOBS))]
    scores = ", ".join(json.dumps({"task": t, "score": len(t) * s * 3}) for t, s in JOBS)
    stories[root] = [
        *lead,
        *sorted(lead_ends),
        f"2 text scores: {scores}",
        f"2 output {_short('scores: ' + scores)}",
    ]
    return stories


def stories(chunks: Sequence[Chunk], root: str) -> dict[str, list[str]]:
    """Each agent's story, the lead's ends sorted as in `expected_stories`."""
    agents = sorted({chunk.agent_id for chunk in chunks})
    told = {agent: story(chunks, agent) for agent in agents}
    lead = told[root]
    starts = len(JOBS) * 2 + 1
    told[root] = [*lead[:starts], *sorted(lead[starts:-2]), *lead[-2:]]
    return told
