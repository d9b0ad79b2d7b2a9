"""The tool calls one session's stream shows (`StreamCalls`): every `tool_start` gets its
`tool_end`, in the step that announced it, however the session ends; and after a takeover or a
resume, what a step begun and never saved left behind is taken up when that step runs again.
See docs/architecture.md, "Redone steps".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.protocol import (
    AssistantMessage,
    BaseChunk,
    Message,
    RedoReason,
    ToolEndChunk,
    ToolMessage,
    ToolStartChunk,
)
from app.runtime.emitter import StreamWriter
from app.runtime.stale import STALE_CALL, Leftovers, StaleCall, redo


class StreamCalls:
    """One session's calls in its root's stream: those still open, and after a takeover or a
    resume, those of the step the stream shows begun (`stale.Leftovers`)."""

    def __init__(self, writer: StreamWriter, session_id: str, agent: str) -> None:
        self._writer = writer
        self._session_id = session_id
        self._agent = agent
        self._open: dict[str, tuple[str, int]] = {}
        """The calls (id: tool name, step) whose `tool_start` the stream has with no `tool_end`
        yet: a session that ends stopped or failed ends them (every `tool_start` is closed),
        each in the step that announced it."""
        self._stale: dict[str, StaleCall] = {}
        """The calls of a step that was never committed (a dead process's, or a stopped
        one's), which the stream shows; the step's next model call takes them up (`redo`)."""
        self._begun = 0
        """The step of the session's last chunk in the stream. When it is the step about to
        run, the step is redone, and the stream says so (`step_redo`)."""
        self._reason: RedoReason = "takeover"

    def take_up(self, left: Leftovers, used_ids: set[str]) -> None:
        """Take up what the stream shows of the session when it runs again: its open calls
        (ended by its run, or by its end), and those of a step it had begun whose ids its
        conversation does not hold (`used_ids`)."""
        for call_id, call in left.calls.items():
            if call.open:
                self._open[call_id] = (call.name, call.step)
            if call_id not in used_ids:
                self._stale[call_id] = call
        self._begun = left.step
        self._reason = "resume" if left.stopped else "takeover"

    def redone(self, step: int) -> RedoReason | None:
        """Why `step`, whose model call starts now, runs again (None for a new step). Asked once
        per run: only its first step can be one begun before."""
        reason = self._reason if self._begun == step else None
        self._begun = 0
        return reason

    def seen(self, chunk_type: type[BaseChunk], fields: dict[str, Any], step: int) -> None:
        """Keep track of a chunk the session emitted in `step`."""
        if chunk_type is ToolStartChunk:
            self._open[fields["tool_call_id"]] = (fields["tool_name"], step)
        elif chunk_type is ToolEndChunk:
            self._open.pop(fields["tool_call_id"], None)

    def reopened(self, call_id: str, name: str, step: int) -> None:
        """A call announced before a pause is open again, in `step`, until its answer ends it."""
        self._open[call_id] = (name, step)

    def end_answered(self, messages: Sequence[Message]) -> None:
        """End the open calls whose answers the conversation holds: those the client answered,
        appended by a resume's write. Taken from the store, not from the resume, so a resume
        cut short after its write (its caller gone, its answer lost) still has them ended by
        whichever run comes next."""
        answers = {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}
        for call_id, (name, step) in list(self._open.items()):
            answer = answers.get(call_id)
            if answer is not None:
                self._end(call_id, name, step, result=answer.result, error=answer.error)

    def redo(self, response: AssistantMessage, used_ids: set[str], turn: int) -> AssistantMessage:
        """The response of a step begun before: the calls left open that it does not make again
        end in the stream, and their ids stay theirs (`stale.redo`)."""
        if not self._stale:
            return response
        calls, ended = redo(response.tool_calls, self._stale, used_ids, turn)
        for call_id in ended:
            stale = self._stale[call_id]
            self._end(call_id, stale.name, stale.step, error=STALE_CALL)
        self._stale = {}
        if calls == response.tool_calls:
            return response
        return AssistantMessage.trusted({"content": response.content, "tool_calls": calls})

    def end_open(self, error: str) -> None:
        """End every open call with `error` (the session ends stopped or failed)."""
        for call_id, (name, step) in list(self._open.items()):
            self._end(call_id, name, step, error=error)

    def _end(self, call_id: str, name: str, step: int, **fields: Any) -> None:
        """End an open call in the step that announced it (a call a dead process left open
        belongs to a step this run may not have reached)."""
        self._open.pop(call_id, None)
        fields = {"tool_call_id": call_id, "tool_name": name, **fields}
        self._writer.emit(ToolEndChunk, self._session_id, self._agent, step, fields)
