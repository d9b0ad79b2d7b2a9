"""What a dead process left in a stream, taken up when its sessions run again.

A process that dies in a step it never committed leaves that step's chunks in the stream: its
text, and `tool_start` chunks with no `tool_end`. On takeover the step runs again, and the model
may answer it otherwise. Each session that runs again takes up its own leftovers: a redone step
opens with a `step_redo` chunk, which tells readers to drop what the step streamed before; a
call of the redone step with the same id, tool and arguments is the same call (announced again
and ended by its run); every other open call is ended with `STALE_CALL`, and a new call that
took its id gets another, so an id never names two calls in a stream. See
docs/architecture.md, "Trees and leases" and "Redone steps".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import JsonValue

from app.ids import fresh_call_id
from app.protocol import ToolCall, ToolEndChunk, ToolStartChunk
from app.store import StateStore

STALE_CALL = "The process running this call stopped before its step was saved: the step runs again"
"""What ends a call a dead process left open, when the step it was part of runs again."""

PAGE = 1000
"""Chunks read at a time."""


@dataclass(frozen=True, slots=True)
class StaleCall:
    """A call whose `tool_start` is in the stream with no `tool_end`."""

    name: str
    arguments: JsonValue


@dataclass(slots=True)
class Leftovers:
    """What the stream holds of one session."""

    calls: dict[str, StaleCall] = field(default_factory=dict)
    """The calls left open, by id."""
    step: int = 0
    """The step of the session's last chunk: when it is the step the session runs next, that
    step was begun and never saved. (The last chunk, not the highest step: a continued
    session numbers its steps from 1 again.)"""


async def read_stale(store: StateStore, stream_id: str) -> dict[str, Leftovers]:
    """What the stream holds of each session: its open calls and its last step."""
    opened: dict[tuple[str, str], StaleCall] = {}
    steps: dict[str, int] = {}
    after = 0
    while True:
        page = await store.read_chunks(stream_id, after=after, limit=PAGE)
        for chunk in page:
            steps[chunk.agent_id] = chunk.step
            if isinstance(chunk, ToolStartChunk):
                key = (chunk.agent_id, chunk.tool_call_id)
                opened[key] = StaleCall(chunk.tool_name, chunk.arguments)
            elif isinstance(chunk, ToolEndChunk):
                opened.pop((chunk.agent_id, chunk.tool_call_id), None)
        if len(page) < PAGE:
            break
        after = page[-1].sequence
    by_session = {session_id: Leftovers(step=step) for session_id, step in steps.items()}
    for (session_id, call_id), call in opened.items():
        by_session[session_id].calls[call_id] = call
    return by_session


def redo(
    calls: tuple[ToolCall, ...], stale: dict[str, StaleCall], used: set[str], turn: int
) -> tuple[tuple[ToolCall, ...], list[str]]:
    """The redone step's `calls` (one that took a stale call's id for another tool or other
    arguments gets a fresh id, added to `used`) and the ids of the stale calls to end."""
    same = {
        call.id
        for call in calls
        if stale.get(call.id or "") == StaleCall(call.name, call.arguments)
    }
    ended = [call_id for call_id in stale if call_id not in same]
    used.update(ended)
    taken = set(ended)
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
    return tuple(kept), ended
