"""AG-UI events (protocol 1.0), as a view of a stored stream (no I/O).

What `@ag-ui/client`'s `HttpAgent` reads. One connection is one run: `RUN_STARTED`, then

- per agent step `STEP_STARTED`/`STEP_FINISHED` (`step-<n>`), per run of text deltas a text
  message (`TEXT_MESSAGE_START`/`CONTENT`/`END`), per tool call `TOOL_CALL_START`/`ARGS`/`END`
  and its `TOOL_CALL_RESULT`;
- sub-agents as AG-UI subagents: `SUBAGENT_STARTED` (with the parent's call and, when nested,
  the parent subagent), their events carrying `subagentRunId` (their session id), then
  `SUBAGENT_FINISHED` or `SUBAGENT_ERROR`. A sub-agent's tool call ids are prefixed with its
  session id (`<session>/<call>`): ids are per session here and per run in AG-UI;
- state: `STATE_SNAPSHOT` of the tree (`{"agents": {id: {agentType, parentId, status}}}`) at
  the start, `STATE_DELTA` (JSON Patch) as agents start and end;
- the end: `RUN_FINISHED` with the output (`success`), `cancelled` for an interrupt, an
  `interrupt` outcome listing the calls that wait for the client; `RUN_ERROR` for a failure.

The events are the types of `app.protocol.ag_ui_events` (those that open and end the run, of
`app.protocol.ag_ui_run`), which the document describes.

Resuming after sequence N replays 1..N silently, then reopens what was open at N (subagents,
steps, text messages with their ids), so the client's messages continue without repeats.
A step that runs again (`step_redo`) finishes the step, sends a `CUSTOM` event `step_redo`
naming the text messages of the void attempt, and starts the step anew.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from app.protocol.ag_ui_events import (
    AgUiEvent,
    ChunkEvent,
    StateDelta,
    StepFinished,
    StepRedoEvent,
    StepStarted,
    SubagentError,
    SubagentFinished,
    SubagentStarted,
    TextMessageContent,
    TextMessageEnd,
    TextMessageStart,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallResult,
    ToolCallStart,
)
from app.protocol.ag_ui_run import (
    AgentEntry,
    AgentStatus,
    Interrupt,
    PatchOperation,
    RunFinished,
)

_Attributable = TypeVar(
    "_Attributable",
    StepStarted,
    StepFinished,
    StepRedoEvent,
    TextMessageStart,
    TextMessageContent,
    TextMessageEnd,
    ToolCallStart,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallResult,
)


@dataclass
class _Agent:
    session_id: str
    agent_type: str
    parent_id: str | None
    call_id: str | None
    status: AgentStatus = "running"
    step: int | None = None
    text_id: str | None = None
    last_text_id: str | None = None
    step_text_ids: list[str] = field(default_factory=list)
    """The text messages of the step in progress."""
    active: bool = True
    order: int = 0


class AgUiView:
    """Turns a stream's chunks into AG-UI events: `replay` what was sent before, then
    `opening`, `page` for each page of new chunks, and `closing` with the final status."""

    def __init__(self, root_id: str, root_type: str, *, thread_id: str, run_id: str) -> None:
        self.root_id = root_id
        self.thread_id = thread_id
        self.run_id = run_id
        self._agents: dict[str, _Agent] = {root_id: _Agent(root_id, root_type, None, None)}
        self._output: Any = None
        self._error: str | None = None
        self._interrupts: list[Interrupt] = []

    def replay(self, chunks: list[dict[str, Any]]) -> None:
        """Take in chunks that were already sent, without sending anything."""
        ignored: list[ChunkEvent] = []
        for chunk in chunks:
            self._feed(chunk, ignored)

    def opening(self) -> list[AgUiEvent]:
        """`RUN_STARTED`, the tree's state, and what was open at the resume point."""
        events: list[AgUiEvent] = [
            {"type": "RUN_STARTED", "threadId": self.thread_id, "runId": self.run_id},
            {"type": "STATE_SNAPSHOT", "snapshot": {"agents": self._state()}},
        ]
        for agent in sorted(self._agents.values(), key=lambda a: a.order):
            if agent.session_id != self.root_id and agent.active:
                events.append(self._subagent_started(agent))
            if agent.step is not None:
                events.append(self._step_started(agent))
            if agent.text_id is not None:
                events.append(self._text_start(agent, agent.text_id))
        return events

    def page(self, chunks: list[dict[str, Any]]) -> list[ChunkEvent]:
        """The events of a page of new chunks. The last event of each chunk carries the
        chunk's sequence as `metadata.sequence`: where a client resumes from
        (`forwardedProps.fromSequence`, or `?fromSequence=`)."""
        events: list[ChunkEvent] = []
        for chunk in chunks:
            mark = len(events)
            self._feed(chunk, events)
            if len(events) > mark:
                events[-1]["metadata"] = {"sequence": chunk["sequence"]}
        return events

    def closing(self, status: str) -> list[AgUiEvent]:
        """Close everything still open, then end the run as `status` says."""
        closed: list[ChunkEvent] = []
        agents = sorted(self._agents.values(), key=lambda a: a.order, reverse=True)
        for agent in agents:
            self._end_text(agent, closed)
            self._end_step(agent, closed)
            if agent.session_id != self.root_id and agent.active:
                agent.active = False
                finished: SubagentFinished = {
                    "type": "SUBAGENT_FINISHED",
                    "subagentRunId": agent.session_id,
                }
                if status == "paused_awaiting_client":
                    finished["outcome"] = {"type": "suspended"}
                closed.append(finished)
        events: list[AgUiEvent] = [*closed]
        if status == "failed":
            events.append({"type": "RUN_ERROR", "message": self._error or "The run failed"})
            return events
        end: RunFinished = {
            "type": "RUN_FINISHED",
            "threadId": self.thread_id,
            "runId": self.run_id,
            "outcome": {"type": "success"},
        }
        if status == "paused_awaiting_client" and self._interrupts:
            end["outcome"] = {"type": "interrupt", "interrupts": self._interrupts}
        elif status in ("interrupted", "terminated"):
            end["outcome"] = {"type": "cancelled"}
        elif self._output is not None:
            end["result"] = self._output
        events.append(end)
        return events

    # -- one chunk -------------------------------------------------------------------------

    def _feed(self, chunk: dict[str, Any], events: list[ChunkEvent]) -> None:
        agent = self._agents.get(chunk["agentId"])
        if agent is None:  # started before an old stream's resume point: attach it to the root
            agent = self._add(chunk["agentId"], chunk["agentType"], self.root_id, None)
        kind = chunk["type"]
        if chunk["step"] != agent.step and kind != "subagent_end":
            self._end_text(agent, events)
            self._end_step(agent, events)
            agent.step = chunk["step"]
            events.append(self._step_started(agent))
        if kind == "text_delta":
            if agent.text_id is None:
                agent.text_id = f"{agent.session_id}:{chunk['sequence']}"
                agent.step_text_ids.append(agent.text_id)
                events.append(self._text_start(agent, agent.text_id))
            delta: TextMessageContent = {
                "type": "TEXT_MESSAGE_CONTENT",
                "messageId": agent.text_id,
                "delta": chunk["delta"],
            }
            events.append(self._attributed(agent, delta))
            return
        self._end_text(agent, events)
        if kind == "tool_start":
            self._tool_call(agent, chunk, events)
        elif kind == "tool_end":
            call_id = self._call_id(agent, chunk["toolCallId"])
            error = chunk.get("error")
            result: ToolCallResult = {
                "type": "TOOL_CALL_RESULT",
                "messageId": f"{call_id}:result",
                "toolCallId": call_id,
                "content": error if error is not None else json.dumps(chunk.get("result")),
                "role": "tool",
            }
            events.append(self._attributed(agent, result))
        elif kind == "tool_pending":
            interrupt: Interrupt = {
                "id": self._call_id(agent, chunk["toolCallId"]),
                "reason": "approval" if chunk["reason"] == "approval" else "client_tool",
                "toolCallId": self._call_id(agent, chunk["toolCallId"]),
                "message": f"{chunk['toolName']} waits for the client",
            }
            if agent.session_id != self.root_id:
                interrupt["subagentRunId"] = agent.session_id
            self._interrupts.append(interrupt)
        elif kind == "subagent_start":
            child = self._add(
                chunk["subSessionId"],
                chunk["subAgentType"],
                agent.session_id,
                self._call_id(agent, chunk["callId"]),
            )
            events.append(self._subagent_started(child))
            events.append(self._patch("add", child))
        elif kind == "subagent_end":
            self._subagent_end(chunk, events)
        elif kind == "output" and agent.session_id == self.root_id:
            self._output = chunk.get("output")
        elif kind == "error" and agent.session_id == self.root_id:
            self._error = chunk["error"]
        elif kind == "step_redo":
            self._redo(agent, chunk, events)

    def _redo(self, agent: _Agent, chunk: dict[str, Any], events: list[ChunkEvent]) -> None:
        voided = agent.step_text_ids
        self._end_step(agent, events)
        redo: StepRedoEvent = {
            "type": "CUSTOM",
            "name": "step_redo",
            "value": {
                "stepName": f"step-{chunk['step']}",
                "reason": chunk["reason"],
                "messageIds": voided,
            },
        }
        events.append(self._attributed(agent, redo))
        agent.step = chunk["step"]
        events.append(self._step_started(agent))

    def _tool_call(self, agent: _Agent, chunk: dict[str, Any], events: list[ChunkEvent]) -> None:
        call_id = self._call_id(agent, chunk["toolCallId"])
        start: ToolCallStart = {
            "type": "TOOL_CALL_START",
            "toolCallId": call_id,
            "toolCallName": chunk["toolName"],
        }
        if agent.last_text_id is not None:
            start["parentMessageId"] = agent.last_text_id
        arguments = chunk["arguments"]
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        args: ToolCallArgs = {"type": "TOOL_CALL_ARGS", "toolCallId": call_id, "delta": text}
        end: ToolCallEnd = {"type": "TOOL_CALL_END", "toolCallId": call_id}
        events.append(self._attributed(agent, start))
        events.append(self._attributed(agent, args))
        events.append(self._attributed(agent, end))

    def _subagent_end(self, chunk: dict[str, Any], events: list[ChunkEvent]) -> None:
        child = self._agents.get(chunk["subSessionId"])
        if child is None:
            child = self._add(chunk["subSessionId"], chunk["subAgentType"], self.root_id, None)
        self._end_text(child, events)
        self._end_step(child, events)
        result = chunk.get("result")
        failed = isinstance(result, dict) and result.get("success") is False
        child.status = "failed" if failed else "completed"
        if child.active:
            child.active = False
            if failed:
                error: SubagentError = {
                    "type": "SUBAGENT_ERROR",
                    "subagentRunId": child.session_id,
                    "message": str(result.get("error")),  # type: ignore[union-attr]
                }
                events.append(error)
            else:
                finished: SubagentFinished = {
                    "type": "SUBAGENT_FINISHED",
                    "subagentRunId": child.session_id,
                }
                if result is not None:
                    finished["result"] = result
                events.append(finished)
        events.append(self._patch("replace", child))

    # -- helpers ---------------------------------------------------------------------------

    def _add(self, session_id: str, agent_type: str, parent: str, call: str | None) -> _Agent:
        agent = _Agent(session_id, agent_type, parent, call, order=len(self._agents))
        self._agents[session_id] = agent
        return agent

    def _call_id(self, agent: _Agent, call_id: str) -> str:
        return call_id if agent.session_id == self.root_id else f"{agent.session_id}/{call_id}"

    def _attributed(self, agent: _Agent, event: _Attributable) -> _Attributable:
        if agent.session_id != self.root_id:
            event["subagentRunId"] = agent.session_id
        return event

    def _step_started(self, agent: _Agent) -> StepStarted:
        event: StepStarted = {"type": "STEP_STARTED", "stepName": f"step-{agent.step}"}
        return self._attributed(agent, event)

    def _text_start(self, agent: _Agent, message_id: str) -> TextMessageStart:
        event: TextMessageStart = {
            "type": "TEXT_MESSAGE_START",
            "messageId": message_id,
            "role": "assistant",
        }
        return self._attributed(agent, event)

    def _subagent_started(self, agent: _Agent) -> SubagentStarted:
        event: SubagentStarted = {
            "type": "SUBAGENT_STARTED",
            "subagentRunId": agent.session_id,
            "name": agent.agent_type,
        }
        if agent.call_id is not None:
            event["parentToolCallId"] = agent.call_id
        if agent.parent_id is not None and agent.parent_id != self.root_id:
            event["parentSubagentRunId"] = agent.parent_id
        return event

    def _end_text(self, agent: _Agent, events: list[ChunkEvent]) -> None:
        if agent.text_id is not None:
            end: TextMessageEnd = {"type": "TEXT_MESSAGE_END", "messageId": agent.text_id}
            events.append(self._attributed(agent, end))
            agent.last_text_id, agent.text_id = agent.text_id, None

    def _end_step(self, agent: _Agent, events: list[ChunkEvent]) -> None:
        if agent.step is not None:
            finished: StepFinished = {"type": "STEP_FINISHED", "stepName": f"step-{agent.step}"}
            events.append(self._attributed(agent, finished))
            agent.step = None
            agent.last_text_id = None
            agent.step_text_ids = []

    def _state(self) -> dict[str, AgentEntry]:
        return {agent.session_id: self._entry(agent) for agent in self._agents.values()}

    def _entry(self, agent: _Agent) -> AgentEntry:
        return {"agentType": agent.agent_type, "parentId": agent.parent_id, "status": agent.status}

    def _patch(self, op: Literal["add", "replace"], agent: _Agent) -> StateDelta:
        operation: PatchOperation = {
            "op": op,
            "path": f"/agents/{agent.session_id}",
            "value": self._entry(agent),
        }
        return {"type": "STATE_DELTA", "delta": [operation]}
