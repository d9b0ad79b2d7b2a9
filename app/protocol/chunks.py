"""The typed stream chunks: a frozen model per type, joined in one union."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter

from app.protocol._base import Json, WireModel


class BaseChunk(WireModel):
    """Fields every chunk carries."""

    type: str
    """The chunk type (the union's discriminator)."""
    sequence: int
    """Position in the stream: 1, 2, 3, ... with no gap."""
    agent_id: str
    """The session id of the agent that emitted the chunk."""
    agent_type: str
    """The emitting agent's type."""
    step: int
    """The emitting agent's step (1-based; 0 before its first model call)."""
    timestamp: int
    """When the chunk was emitted, ms since epoch."""


class TextDeltaChunk(BaseChunk):
    """A piece of the model's streamed text."""

    type: Literal["text_delta"] = "text_delta"
    """`text_delta`."""
    delta: str
    """The text."""


class ToolStartChunk(BaseChunk):
    """A tool call begins."""

    type: Literal["tool_start"] = "tool_start"
    """`tool_start`."""
    tool_call_id: str
    """The call's id."""
    tool_name: str
    """The tool's name."""
    arguments: dict[str, Any] | str
    """The call's arguments (raw text when the model's JSON was invalid)."""


class ToolEndChunk(BaseChunk):
    """A tool call ended."""

    type: Literal["tool_end"] = "tool_end"
    """`tool_end`."""
    tool_call_id: str
    """The call's id."""
    tool_name: str
    """The tool's name."""
    result: Json = None
    """The tool's result."""
    error: str | None = None
    """The error message; null on success."""


class SubagentStartChunk(BaseChunk):
    """A sub-agent starts; its own chunks follow with its session id as `agentId`."""

    type: Literal["subagent_start"] = "subagent_start"
    """`subagent_start`."""
    sub_agent_type: str
    """The child's agent type."""
    sub_session_id: str
    """The child's session id."""
    call_id: str
    """The parent's tool call that started it."""


class SubagentEndChunk(BaseChunk):
    """A sub-agent ended."""

    type: Literal["subagent_end"] = "subagent_end"
    """`subagent_end`."""
    sub_agent_type: str
    """The child's agent type."""
    sub_session_id: str
    """The child's session id."""
    call_id: str
    """The parent's tool call that started it."""
    result: Json = None
    """The child's output; a failure is `{"success": false, "error": "..."}`."""


class OutputChunk(BaseChunk):
    """The agent's final output."""

    type: Literal["output"] = "output"
    """`output`."""
    output: Json = None
    """The output: the validated `output_schema` object, or the final text."""


class ErrorChunk(BaseChunk):
    """The agent failed."""

    type: Literal["error"] = "error"
    """`error`."""
    error: str
    """What went wrong."""


class InterruptedChunk(BaseChunk):
    """The agent was interrupted."""

    type: Literal["interrupted"] = "interrupted"
    """`interrupted`."""
    reason: str | None = None
    """The reason given with the interrupt."""


class ToolPendingChunk(BaseChunk):
    """The session pauses until the client answers this call."""

    type: Literal["tool_pending"] = "tool_pending"
    """`tool_pending`."""
    tool_call_id: str
    """The call's id."""
    tool_name: str
    """The tool's name."""
    arguments: dict[str, Any] | str
    """The call's arguments."""
    reason: Literal["client", "approval"]
    """`client` for a client tool's result, `approval` for an approval."""


RedoReason = Literal["takeover", "resume", "model_retry"]
"""Why a step runs again (`StepRedoChunk.reason`)."""


class StepRedoChunk(BaseChunk):
    """The agent's step (`step`) runs again: what the agent streamed for that step before this
    chunk is void (partial text, calls), and the step's new attempt follows. See
    docs/architecture.md, "Redone steps"."""

    type: Literal["step_redo"] = "step_redo"
    """`step_redo`."""
    reason: RedoReason
    """`takeover`: the process running the step died before saving it, and another took the
    session over; `resume`: a stop cut the step, and the session was resumed; `model_retry`:
    the model call failed after streaming and was retried."""


Chunk = Annotated[
    TextDeltaChunk
    | ToolStartChunk
    | ToolEndChunk
    | SubagentStartChunk
    | SubagentEndChunk
    | OutputChunk
    | ErrorChunk
    | InterruptedChunk
    | ToolPendingChunk
    | StepRedoChunk,
    Field(discriminator="type"),
]
"""Any stream chunk."""

CHUNK_ADAPTER: TypeAdapter[Chunk] = TypeAdapter(Chunk)
"""Validates and serialises a `Chunk`."""


def chunk_to_json(chunk: BaseChunk) -> bytes:
    """The chunk's wire JSON (camelCase keys)."""
    return chunk.__pydantic_serializer__.to_json(chunk, by_alias=True)


def chunk_from_json(data: str | bytes) -> Chunk:
    """Parse a chunk from its wire JSON."""
    return CHUNK_ADAPTER.validate_json(data)
