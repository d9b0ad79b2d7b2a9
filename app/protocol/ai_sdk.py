"""The Vercel AI SDK's UI message stream, as a view of a stored stream (no I/O).

What `useChat` (`@ai-sdk/react`) and the `ai` package's `readUIMessageStream` read: one
assistant message per connection, whose parts are built from the chunks.

- The root agent's text is text parts; each of its tool calls (sub-agent calls included, as
  `subagent__<type>`) a dynamic tool part; a call awaiting approval a `tool-approval-request`.
  A client tool's call stays `input-available` for the client to answer (`onToolCall`).
- Each sub-agent (any depth) is one `data-agent` part (id: its session id) holding its whole
  state (status, text, tool calls, output). The part is sent again when it changes, at most
  once per page of chunks: the client replaces it by id, so a resumed stream never repeats it.
- The root's structured output (an `output_schema` object; text output is the text parts)
  is a `data-output` part; after each page a transient
  `data-cursor` part carries the last sequence sent (`onData`), for a client that resumes
  with `fromSequence`.

Chunks are read as JSON dicts (camelCase, as stored): the view never builds the typed models.
The parts it sends are the types of `app.protocol.ai_sdk_parts`, which the document describes.
A step that runs again (`step_redo`) ends the root's step and starts it anew, with a
`data-redo` part naming the text parts of the void attempt; a sub-agent's part loses that
text. Chunk types added later are ignored until mapped here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.protocol.ai_sdk_parts import (
    AgentState,
    AgentStatus,
    AgentToolCall,
    DataAgentPart,
    DataRedoPart,
    FinishReason,
    UIPart,
)

HEADERS = {"x-vercel-ai-ui-message-stream": "v1"}
"""The response header the AI SDK's clients look for."""

DONE = "[DONE]"
"""The stream's last `data:` line."""

FINISH_REASONS: dict[str, FinishReason] = {
    "completed": "stop",
    "failed": "error",
    "interrupted": "other",
    "terminated": "other",
    "paused_awaiting_client": "tool-calls",
}


@dataclass
class _Agent:
    """A sub-agent's state, sent whole as its `data-agent` part."""

    session_id: str
    agent_type: str
    parent_session_id: str
    call_id: str
    status: AgentStatus = "running"
    text: str = ""
    text_step: int | None = None
    """The step of the last text, which starts at `step_text` in `text`."""
    step_text: int = 0
    tools: dict[str, AgentToolCall] = field(default_factory=dict)
    output: Any = None
    error: str | None = None

    def part(self) -> DataAgentPart:
        data: AgentState = {
            "sessionId": self.session_id,
            "agentType": self.agent_type,
            "parentSessionId": self.parent_session_id,
            "callId": self.call_id,
            "status": self.status,
            "text": self.text,
            "tools": list(self.tools.values()),
            "output": self.output,
            "error": self.error,
        }
        return {"type": "data-agent", "id": self.session_id, "data": data}


class UIMessageView:
    """Turns a stream's chunks (from some sequence on) into UI message stream parts.

    `replay` the chunks up to the resume point (their parts were sent before), then `opening`,
    then `page` for each page of new chunks, then `closing` with the run's final status.
    """

    def __init__(self, root_id: str, *, message_id: str) -> None:
        self.root_id = root_id
        self.message_id = message_id
        self._text_id: str | None = None
        self._step: int | None = None
        self._step_text_ids: list[str] = []
        """The root's text parts of the step in progress."""
        self._agents: dict[str, _Agent] = {}
        self._changed: dict[str, _Agent] = {}
        self._last = 0

    def replay(self, chunks: list[dict[str, Any]]) -> None:
        """Take in chunks that were already sent, without sending anything."""
        for chunk in chunks:
            self._feed(chunk, [])
        self._changed.clear()

    def opening(self) -> list[UIPart]:
        """The parts that open a connection: the message, the step and text in progress."""
        parts: list[UIPart] = [{"type": "start", "messageId": self.message_id}]
        if self._step is not None:
            parts.append({"type": "start-step"})
        if self._text_id is not None:
            parts.append({"type": "text-start", "id": self._text_id})
        return parts

    def page(self, chunks: list[dict[str, Any]]) -> list[UIPart]:
        """The parts for a page of new chunks, sub-agents' state coalesced, then the cursor."""
        parts: list[UIPart] = []
        for chunk in chunks:
            self._feed(chunk, parts)
        for agent in self._changed.values():
            parts.append(agent.part())
        self._changed.clear()
        if chunks:
            parts.append(
                {"type": "data-cursor", "data": {"sequence": self._last}, "transient": True}
            )
        return parts

    def closing(self, status: str) -> list[UIPart]:
        """The parts that end the message once the run has stopped with `status`."""
        parts: list[UIPart] = []
        self._end_text(parts)
        if self._step is not None:
            parts.append({"type": "finish-step"})
        parts.append({"type": "finish", "finishReason": FINISH_REASONS.get(status, "other")})
        return parts

    # -- one chunk -------------------------------------------------------------------------

    def _feed(self, chunk: dict[str, Any], parts: list[UIPart]) -> None:
        self._last = chunk["sequence"]
        if chunk["agentId"] == self.root_id:
            self._root(chunk, parts)
        else:
            self._child(chunk)
        if chunk["type"] == "subagent_start":
            agent = _Agent(
                chunk["subSessionId"], chunk["subAgentType"], chunk["agentId"], chunk["callId"]
            )
            self._agents[agent.session_id] = agent
            self._changed[agent.session_id] = agent
        elif chunk["type"] == "subagent_end":
            agent = self._agents.get(chunk["subSessionId"]) or _Agent(
                chunk["subSessionId"], chunk["subAgentType"], chunk["agentId"], chunk["callId"]
            )
            result = chunk.get("result")
            failed = isinstance(result, dict) and result.get("success") is False
            agent.status = "failed" if failed else "completed"
            if failed:
                agent.error = str(result.get("error"))  # type: ignore[union-attr]
            else:
                agent.output = result
            self._agents[agent.session_id] = agent
            self._changed[agent.session_id] = agent

    def _root(self, chunk: dict[str, Any], parts: list[UIPart]) -> None:
        kind = chunk["type"]
        if chunk["step"] != self._step and kind != "subagent_end":
            self._end_text(parts)
            if self._step is not None:
                parts.append({"type": "finish-step"})
            parts.append({"type": "start-step"})
            self._step = chunk["step"]
            self._step_text_ids = []
        if kind == "text_delta":
            if self._text_id is None:
                self._text_id = f"{chunk['agentId']}:{chunk['sequence']}"
                self._step_text_ids.append(self._text_id)
                parts.append({"type": "text-start", "id": self._text_id})
            parts.append({"type": "text-delta", "id": self._text_id, "delta": chunk["delta"]})
            return
        self._end_text(parts)
        if kind == "tool_start":
            parts.append(
                {
                    "type": "tool-input-available",
                    "toolCallId": chunk["toolCallId"],
                    "toolName": chunk["toolName"],
                    "input": chunk["arguments"],
                    "dynamic": True,
                }
            )
        elif kind == "tool_end":
            if chunk.get("error") is not None:
                parts.append(
                    {
                        "type": "tool-output-error",
                        "toolCallId": chunk["toolCallId"],
                        "errorText": chunk["error"],
                        "dynamic": True,
                    }
                )
            else:
                parts.append(
                    {
                        "type": "tool-output-available",
                        "toolCallId": chunk["toolCallId"],
                        "output": chunk.get("result"),
                        "dynamic": True,
                    }
                )
        elif kind == "tool_pending" and chunk["reason"] == "approval":
            parts.append(
                {
                    "type": "tool-approval-request",
                    "approvalId": chunk["toolCallId"],
                    "toolCallId": chunk["toolCallId"],
                }
            )
        elif kind == "output" and not isinstance(chunk.get("output"), str | None):
            parts.append({"type": "data-output", "id": self.root_id, "data": chunk["output"]})
        elif kind == "error":
            parts.append({"type": "error", "errorText": chunk["error"]})
        elif kind == "step_redo":
            parts.append({"type": "finish-step"})
            parts.append({"type": "start-step"})
            parts.append(_redo(chunk, self._step_text_ids))
            self._step_text_ids = []

    def _child(self, chunk: dict[str, Any]) -> None:
        agent = self._agents.get(chunk["agentId"])
        if agent is None:  # its subagent_start came before the resume point of an old stream
            agent = _Agent(chunk["agentId"], chunk["agentType"], self.root_id, "")
            self._agents[agent.session_id] = agent
        kind = chunk["type"]
        if kind == "text_delta":
            if agent.text_step != chunk["step"]:
                agent.text_step, agent.step_text = chunk["step"], len(agent.text)
            agent.text += chunk["delta"]
        elif kind in ("tool_start", "tool_pending"):
            agent.tools[chunk["toolCallId"]] = {
                "toolCallId": chunk["toolCallId"],
                "toolName": chunk["toolName"],
                "input": chunk["arguments"],
                "state": "input-available" if kind == "tool_start" else "pending",
            }
        elif kind == "tool_end":
            started = agent.tools.get(chunk["toolCallId"])
            tool: AgentToolCall = {
                "toolCallId": chunk["toolCallId"],
                "toolName": chunk["toolName"],
                "input": None if started is None else started["input"],
                "state": "output-available",
            }
            if chunk.get("error") is not None:
                tool["state"], tool["errorText"] = "output-error", chunk["error"]
            else:
                tool["output"] = chunk.get("result")
            agent.tools[chunk["toolCallId"]] = tool
        elif kind == "output":
            agent.output = chunk.get("output")
        elif kind == "error":
            agent.status, agent.error = "failed", chunk["error"]
        elif kind == "interrupted":
            agent.status = "interrupted"
        elif kind == "step_redo":
            if agent.text_step == chunk["step"]:
                agent.text, agent.text_step = agent.text[: agent.step_text], None
        else:
            return
        self._changed[agent.session_id] = agent

    def _end_text(self, parts: list[UIPart]) -> None:
        if self._text_id is not None:
            parts.append({"type": "text-end", "id": self._text_id})
            self._text_id = None


def _redo(chunk: dict[str, Any], text_ids: list[str]) -> DataRedoPart:
    session_id, step = chunk["agentId"], chunk["step"]
    return {
        "type": "data-redo",
        "id": f"{session_id}:{step}",
        "data": {
            "sessionId": session_id,
            "step": step,
            "reason": chunk["reason"],
            "textIds": list(text_ids),
        },
    }
