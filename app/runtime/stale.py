"""What a stream shows of its sessions that their conversations do not hold, taken up when
those sessions run again.

A process that dies in a step it never committed leaves that step's chunks in the stream: its
text, and `tool_start` chunks, most with no `tool_end`; a stop ends its calls in the stream but
drops the step. When the session runs again (a takeover, a resume) the step is made again, and
the model may answer it otherwise. Each session takes up its own leftovers: the redone step
opens with a `step_redo` chunk, which tells readers to drop what the step streamed before; a
call of the redone step with the same id, tool and arguments is the same call (announced again
and ended by its run); every other one left open is ended with `STALE_CALL`, and a new call
that took the id of any other one (an ended one included) gets another, so an id never names
two calls in a stream. See docs/architecture.md, "Trees and leases" and "Redone steps".
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from pydantic import JsonValue

from app.ids import fresh_call_id
from app.protocol import (
    ErrorChunk,
    InterruptedChunk,
    OutputChunk,
    SubagentEndChunk,
    ToolCall,
    ToolEndChunk,
    ToolStartChunk,
)
from app.runtime.children import call_result
from app.runtime.outcome import SUSPENDED, stopped_outcome
from app.store import StateStore

STALE_CALL = "The process running this call stopped before its step was saved: the step runs again"
"""What ends a call a dead process left open, when the step it was part of runs again."""

DROPPED_CHILD = call_result(stopped_outcome(SUSPENDED)).result
"""The `subagent_end` result of a child dropped by a suspension: it starts afresh, its subtree
with it, so their earlier calls are another life's (docs/architecture.md, "The cascade")."""

ENDED = (OutputChunk, ErrorChunk)
"""The chunks that end a session's turn: a step after them is a new one, not one redone."""

PAGE = 1000
"""Chunks read at a time."""


@dataclass(frozen=True, slots=True)
class StaleCall:
    """A call whose `tool_start` is in the stream."""

    name: str
    arguments: JsonValue
    step: int
    """The step it was announced in: its `tool_end` names the same one."""
    open: bool = True
    """Whether the stream has no `tool_end` for it."""

    def same(self, call: ToolCall) -> bool:
        """Whether `call` makes this call again (same tool, same arguments)."""
        return call.name == self.name and call.arguments == self.arguments


@dataclass(slots=True)
class Leftovers:
    """What the stream shows of one session."""

    calls: dict[str, StaleCall] = field(default_factory=dict)
    """The calls it announces (the last `tool_start` of each id), by id."""
    step: int = 0
    """The step of the session's last chunk, unless that chunk ended the session (`output`,
    `error`): when it is the step the session runs next, that step was begun and never saved.
    (The last chunk, not the highest step: a continued session numbers its steps from 1
    again.)"""
    stopped: bool = False
    """Whether that chunk is `interrupted`: the step was cut by a stop, not by a crash."""


async def read_stale(store: StateStore, stream_id: str) -> dict[str, Leftovers]:
    """What the stream shows of each session: the calls it announces and its last step."""
    opened: dict[tuple[str, str], StaleCall] = {}
    steps: dict[str, int] = {}
    stops: dict[str, bool] = {}
    after = 0
    while True:
        page = await store.read_chunks(stream_id, after=after, limit=PAGE)
        for chunk in page:
            steps[chunk.agent_id] = 0 if isinstance(chunk, ENDED) else chunk.step
            stops[chunk.agent_id] = isinstance(chunk, InterruptedChunk)
            if isinstance(chunk, ToolStartChunk):
                key = (chunk.agent_id, chunk.tool_call_id)
                opened[key] = StaleCall(chunk.tool_name, chunk.arguments, chunk.step)
            elif isinstance(chunk, ToolEndChunk):
                key = (chunk.agent_id, chunk.tool_call_id)
                if key in opened:
                    opened[key] = dataclasses.replace(opened[key], open=False)
            elif isinstance(chunk, SubagentEndChunk) and chunk.result == DROPPED_CHILD:
                child = chunk.sub_session_id
                opened = {
                    key: call
                    for key, call in opened.items()
                    if key[0] != child and not key[0].startswith(f"{child}-")
                }
        if len(page) < PAGE:
            break
        after = page[-1].sequence
    by_session = {
        session_id: Leftovers(step=step, stopped=stops[session_id])
        for session_id, step in steps.items()
    }
    for (session_id, call_id), call in opened.items():
        by_session[session_id].calls[call_id] = call
    return by_session


def redo(
    calls: tuple[ToolCall, ...], stale: dict[str, StaleCall], used: set[str], turn: int
) -> tuple[tuple[ToolCall, ...], list[str]]:
    """The redone step's `calls` (one that took a stale call's id for another tool or other
    arguments gets a fresh id, added to `used`) and the ids of the open stale calls to end."""
    same = {call.id for call in calls if call.id in stale and stale[call.id].same(call)}
    others = [call_id for call_id in stale if call_id not in same]
    used.update(others)
    taken = set(others)
    kept: list[ToolCall] = []
    for index, call in enumerate(calls):
        if call.id in taken:
            call = ToolCall.trusted(
                {
                    "name": call.name,
                    "arguments": call.arguments,
                    "id": fresh_call_id(used, turn, index),
                    "original_id": call.original_id or call.id,
                }
            )
        kept.append(call)
    return tuple(kept), [call_id for call_id in others if stale[call_id].open]
