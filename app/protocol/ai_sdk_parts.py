"""The parts of the AI SDK UI message stream that `UIMessageView` sends, one type each, joined in
one union: the view builds exactly these (mypy checks it) and the OpenAPI document describes
each SSE event with the union's JSON Schema (schemathesis checks that).

TypedDicts, not frozen models like the chunks: the view builds a few of them per chunk, on the
hot path of every follower, as plain dicts (what a model costs there is measured in
bench/FRONTEND.md), and the protocol's optional fields are absent, never null, which a
TypedDict's `NotRequired` says exactly. They are the AI SDK's own shapes (the `ai` package's
`uiMessageChunkSchema`), narrowed to what this server sends.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from pydantic import ConfigDict, Field, TypeAdapter, with_config
from typing_extensions import TypedDict  # pydantic reads typing's only from Python 3.12

from app.protocol._base import Json

_CONFIG = ConfigDict(extra="forbid", use_attribute_docstrings=True)

FinishReason = Literal["stop", "error", "other", "tool-calls"]
"""Why the message ends: completed, failed, interrupted or terminated, paused for the client."""


@with_config(_CONFIG)
class StartPart(TypedDict):
    """Opens the assistant message of this connection."""

    type: Literal["start"]
    """`start`."""
    messageId: str
    """The message's id: `<streamId>-<sequence it starts after>`, or the id of the assistant
    message whose pending calls were answered."""


@with_config(_CONFIG)
class StartStepPart(TypedDict):
    """The root agent begins a step (a model call and its tool calls)."""

    type: Literal["start-step"]
    """`start-step`."""


@with_config(_CONFIG)
class FinishStepPart(TypedDict):
    """The root agent's step ends."""

    type: Literal["finish-step"]
    """`finish-step`."""


@with_config(_CONFIG)
class TextStartPart(TypedDict):
    """The root agent begins a run of text."""

    type: Literal["text-start"]
    """`text-start`."""
    id: str
    """The text part's id: `<agentId>:<sequence of its first delta>`."""


@with_config(_CONFIG)
class TextDeltaPart(TypedDict):
    """More of the root agent's text."""

    type: Literal["text-delta"]
    """`text-delta`."""
    id: str
    """The text part it extends."""
    delta: str
    """The text."""


@with_config(_CONFIG)
class TextEndPart(TypedDict):
    """The run of text ends."""

    type: Literal["text-end"]
    """`text-end`."""
    id: str
    """The text part it ends."""


@with_config(_CONFIG)
class ToolInputAvailablePart(TypedDict):
    """The root agent calls a tool (sub-agent calls included, as `subagent__<type>`); a client
    tool's call stays in this state until the client answers it."""

    type: Literal["tool-input-available"]
    """`tool-input-available`."""
    toolCallId: str
    """The call's id."""
    toolName: str
    """The tool's name."""
    input: dict[str, Any] | str
    """The call's arguments (raw text when the model's JSON was invalid)."""
    dynamic: Literal[True]
    """Always true: the tools are the server's, so the client knows none of them statically."""


@with_config(_CONFIG)
class ToolOutputAvailablePart(TypedDict):
    """A root tool call's result."""

    type: Literal["tool-output-available"]
    """`tool-output-available`."""
    toolCallId: str
    """The call's id."""
    output: Json
    """What the tool returned."""
    dynamic: Literal[True]
    """Always true."""


@with_config(_CONFIG)
class ToolOutputErrorPart(TypedDict):
    """A root tool call failed."""

    type: Literal["tool-output-error"]
    """`tool-output-error`."""
    toolCallId: str
    """The call's id."""
    errorText: str
    """The tool's error."""
    dynamic: Literal[True]
    """Always true."""


@with_config(_CONFIG)
class ToolApprovalRequestPart(TypedDict):
    """A root tool call waits for the client's approval (`addToolApprovalResponse`)."""

    type: Literal["tool-approval-request"]
    """`tool-approval-request`."""
    approvalId: str
    """The approval's id: the call's id."""
    toolCallId: str
    """The call's id."""


@with_config(_CONFIG)
class AgentToolCall(TypedDict):
    """A sub-agent's tool call, as its `data-agent` part shows it."""

    toolCallId: str
    """The call's id (unique within the sub-agent's session)."""
    toolName: str
    """The tool's name."""
    input: dict[str, Any] | str | None
    """The call's arguments; null when its start came before the connection's first chunk."""
    state: Literal["input-available", "pending", "output-available", "output-error"]
    """Called, waiting for the client, returned, or failed."""
    output: NotRequired[Json]
    """What the tool returned, once `output-available`."""
    errorText: NotRequired[str]
    """The tool's error, once `output-error`."""


AgentStatus = Literal["running", "completed", "failed", "interrupted"]
"""A sub-agent's status, as its chunks tell it."""


@with_config(_CONFIG)
class AgentState(TypedDict):
    """A sub-agent's whole state."""

    sessionId: str
    """Its session id."""
    agentType: str
    """Its agent type."""
    parentSessionId: str
    """The session that called it."""
    callId: str
    """The parent's tool call that started it (empty when its start came before the
    connection's first chunk)."""
    status: AgentStatus
    """Its status."""
    text: str
    """All the text it has written."""
    tools: list[AgentToolCall]
    """Its tool calls, in the order they started."""
    output: Json
    """Its output, once completed (null before)."""
    error: str | None
    """Why it failed, if it did."""


@with_config(_CONFIG)
class DataAgentPart(TypedDict):
    """A sub-agent (any depth), sent whole again when it changes: the client replaces the part
    with the same id."""

    type: Literal["data-agent"]
    """`data-agent`."""
    id: str
    """The sub-agent's session id."""
    data: AgentState
    """Its state."""


@with_config(_CONFIG)
class DataOutputPart(TypedDict):
    """The root agent's structured output (an agent with an output schema; a text output is
    the text parts)."""

    type: Literal["data-output"]
    """`data-output`."""
    id: str
    """The root session's id."""
    data: Json
    """The output object."""


@with_config(_CONFIG)
class Cursor(TypedDict):
    """Where the stream has got."""

    sequence: int
    """The last sequence sent: resume after it with `fromSequence`."""


@with_config(_CONFIG)
class DataCursorPart(TypedDict):
    """After each page of chunks, the last sequence sent (`onData`; not kept in the message)."""

    type: Literal["data-cursor"]
    """`data-cursor`."""
    data: Cursor
    """The position."""
    transient: Literal[True]
    """Always true: the client does not add it to the message."""


@with_config(_CONFIG)
class Redo(TypedDict):
    """A step that runs again."""

    sessionId: str
    """The agent whose step it is."""
    step: int
    """The step."""
    reason: Literal["takeover", "resume", "model_retry"]
    """Why: its process died before saving it, a stop cut it, or its model call was retried."""
    textIds: list[str]
    """The root's text parts of the step's earlier attempt, to drop (a sub-agent's
    `data-agent` part is sent again without that text)."""


@with_config(_CONFIG)
class DataRedoPart(TypedDict):
    """An agent's step runs again: what its earlier attempt streamed is void."""

    type: Literal["data-redo"]
    """`data-redo`."""
    id: str
    """`<session id>:<step>`."""
    data: Redo
    """Which step, and the text parts to drop."""


@with_config(_CONFIG)
class ErrorPart(TypedDict):
    """The root agent failed."""

    type: Literal["error"]
    """`error`."""
    errorText: str
    """What went wrong."""


@with_config(_CONFIG)
class FinishPart(TypedDict):
    """The message ends: the run has stopped."""

    type: Literal["finish"]
    """`finish`."""
    finishReason: FinishReason
    """How the run stopped."""


UIPart = Annotated[
    StartPart
    | StartStepPart
    | FinishStepPart
    | TextStartPart
    | TextDeltaPart
    | TextEndPart
    | ToolInputAvailablePart
    | ToolOutputAvailablePart
    | ToolOutputErrorPart
    | ToolApprovalRequestPart
    | DataAgentPart
    | DataOutputPart
    | DataCursorPart
    | DataRedoPart
    | ErrorPart
    | FinishPart,
    Field(discriminator="type"),
]
"""One part of the UI message stream (what goes in an SSE `data:` line)."""

UI_PART_ADAPTER: TypeAdapter[UIPart] = TypeAdapter(UIPart)
"""Validates a part and gives the union's JSON Schema."""
