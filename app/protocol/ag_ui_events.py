"""The AG-UI events (protocol 1.0) that `AgUiView` sends, one type each, joined in one union: the
view builds exactly these (mypy checks it) and the OpenAPI document describes each SSE event
with the union's JSON Schema (schemathesis checks that).

TypedDicts, for the reasons `app.protocol.ai_sdk_parts` gives: plain dicts on the hot path, and
optional fields that are absent, never null. They are AG-UI's own shapes (`@ag-ui/core`'s
`EventSchema`), narrowed to what this server sends. Those that open and end a run, with the
tree's state, are in `app.protocol.ag_ui_run`; the events made from chunks are here.
"""

from __future__ import annotations

from typing import Annotated, Literal, NotRequired

from pydantic import ConfigDict, Field, TypeAdapter, with_config
from typing_extensions import TypedDict  # pydantic reads typing's only from Python 3.12

from app.protocol.ag_ui_run import (
    NotNull,
    PatchOperation,
    RunError,
    RunFinished,
    RunStarted,
    StateSnapshot,
)

_CONFIG = ConfigDict(extra="forbid", use_attribute_docstrings=True)


@with_config(_CONFIG)
class SequenceMark(TypedDict):
    """Where in the stored stream an event comes from."""

    sequence: int
    """The chunk's sequence: a run that follows on from here passes it as
    `forwardedProps.fromSequence`."""


@with_config(_CONFIG)
class _ChunkEvent(TypedDict):
    """What an event made from a chunk may carry."""

    metadata: NotRequired[
        Annotated[
            SequenceMark,
            Field(description="On the last event a chunk makes: the chunk's sequence."),
        ]
    ]


@with_config(_CONFIG)
class _AgentEvent(_ChunkEvent):
    """An event of one agent of the tree."""

    subagentRunId: NotRequired[
        Annotated[
            str,
            Field(description="The sub-agent's session id; absent for the root agent's events."),
        ]
    ]


@with_config(_CONFIG)
class StateDelta(_ChunkEvent):
    """An agent of the tree starts or ends."""

    type: Literal["STATE_DELTA"]
    """`STATE_DELTA`."""
    delta: list[PatchOperation]
    """The change."""


@with_config(_CONFIG)
class StepStarted(_AgentEvent):
    """An agent begins a step (a model call and its tool calls)."""

    type: Literal["STEP_STARTED"]
    """`STEP_STARTED`."""
    stepName: str
    """`step-<n>`."""


@with_config(_CONFIG)
class StepFinished(_AgentEvent):
    """An agent's step ends."""

    type: Literal["STEP_FINISHED"]
    """`STEP_FINISHED`."""
    stepName: str
    """`step-<n>`."""


@with_config(_CONFIG)
class StepRedo(TypedDict):
    """A step that runs again."""

    stepName: str
    """`step-<n>`."""
    reason: Literal["takeover", "resume", "model_retry"]
    """Why: its process died before saving it, a stop cut it, or its model call was retried."""
    messageIds: list[str]
    """The text messages of the step's earlier attempt, to drop."""


@with_config(_CONFIG)
class StepRedoEvent(_AgentEvent):
    """An agent's step runs again: what its earlier attempt streamed is void. It comes after
    that attempt's `STEP_FINISHED` and before the new `STEP_STARTED`."""

    type: Literal["CUSTOM"]
    """`CUSTOM`."""
    name: Literal["step_redo"]
    """`step_redo`."""
    value: StepRedo
    """Which step, and the text messages to drop."""


@with_config(_CONFIG)
class TextMessageStart(_AgentEvent):
    """An agent begins a run of text."""

    type: Literal["TEXT_MESSAGE_START"]
    """`TEXT_MESSAGE_START`."""
    messageId: str
    """The message's id: `<sessionId>:<sequence of its first delta>`."""
    role: Literal["assistant"]
    """`assistant`."""


@with_config(_CONFIG)
class TextMessageContent(_AgentEvent):
    """More of the text."""

    type: Literal["TEXT_MESSAGE_CONTENT"]
    """`TEXT_MESSAGE_CONTENT`."""
    messageId: str
    """The message it extends."""
    delta: str
    """The text."""


@with_config(_CONFIG)
class TextMessageEnd(_AgentEvent):
    """The run of text ends."""

    type: Literal["TEXT_MESSAGE_END"]
    """`TEXT_MESSAGE_END`."""
    messageId: str
    """The message it ends."""


@with_config(_CONFIG)
class ToolCallStart(_AgentEvent):
    """An agent calls a tool."""

    type: Literal["TOOL_CALL_START"]
    """`TOOL_CALL_START`."""
    toolCallId: str
    """The call's id; a sub-agent's are `<sessionId>/<callId>` (AG-UI's ids are per run)."""
    toolCallName: str
    """The tool's name."""
    parentMessageId: NotRequired[
        Annotated[str, Field(description="The text message of the step that made the call.")]
    ]


@with_config(_CONFIG)
class ToolCallArgs(_AgentEvent):
    """The call's arguments, whole."""

    type: Literal["TOOL_CALL_ARGS"]
    """`TOOL_CALL_ARGS`."""
    toolCallId: str
    """The call's id."""
    delta: str
    """The arguments as JSON (raw text when the model's JSON was invalid)."""


@with_config(_CONFIG)
class ToolCallEnd(_AgentEvent):
    """The call's arguments are complete."""

    type: Literal["TOOL_CALL_END"]
    """`TOOL_CALL_END`."""
    toolCallId: str
    """The call's id."""


@with_config(_CONFIG)
class ToolCallResult(_AgentEvent):
    """A tool call's result, or its error."""

    type: Literal["TOOL_CALL_RESULT"]
    """`TOOL_CALL_RESULT`."""
    messageId: str
    """The result message's id: `<toolCallId>:result`."""
    toolCallId: str
    """The call's id."""
    content: str
    """The result as JSON, or the error's text."""
    role: Literal["tool"]
    """`tool`."""


@with_config(_CONFIG)
class SubagentStarted(_ChunkEvent):
    """A sub-agent starts (or was running where the connection starts); its events carry its
    session id as `subagentRunId`."""

    type: Literal["SUBAGENT_STARTED"]
    """`SUBAGENT_STARTED`."""
    subagentRunId: str
    """Its session id."""
    name: str
    """Its agent type."""
    parentToolCallId: NotRequired[
        Annotated[str, Field(description="The parent's call that started it, when known.")]
    ]
    parentSubagentRunId: NotRequired[
        Annotated[str, Field(description="The sub-agent that called it; absent for the root.")]
    ]


@with_config(_CONFIG)
class SuspendedOutcome(TypedDict):
    """The sub-agent is paused with the run, awaiting the client."""

    type: Literal["suspended"]
    """`suspended`."""


@with_config(_CONFIG)
class SubagentFinished(_ChunkEvent):
    """A sub-agent's part of this run ends: it completed, or it is suspended."""

    type: Literal["SUBAGENT_FINISHED"]
    """`SUBAGENT_FINISHED`."""
    subagentRunId: str
    """Its session id."""
    result: NotRequired[Annotated[NotNull, Field(description="Its output, when it has one.")]]
    outcome: NotRequired[
        Annotated[SuspendedOutcome, Field(description="Present when it is suspended.")]
    ]


@with_config(_CONFIG)
class SubagentError(_ChunkEvent):
    """A sub-agent failed (its parent goes on)."""

    type: Literal["SUBAGENT_ERROR"]
    """`SUBAGENT_ERROR`."""
    subagentRunId: str
    """Its session id."""
    message: str
    """What went wrong."""


ChunkEvent = (
    StateDelta
    | StepStarted
    | StepFinished
    | StepRedoEvent
    | TextMessageStart
    | TextMessageContent
    | TextMessageEnd
    | ToolCallStart
    | ToolCallArgs
    | ToolCallEnd
    | ToolCallResult
    | SubagentStarted
    | SubagentFinished
    | SubagentError
)
"""An event made from a chunk (any of them may carry the chunk's sequence as metadata)."""

AgUiEvent = Annotated[
    RunStarted | StateSnapshot | ChunkEvent | RunFinished | RunError,
    Field(discriminator="type"),
]
"""Any event of the view (what goes in an SSE `data:` line)."""

AG_UI_EVENT_ADAPTER: TypeAdapter[AgUiEvent] = TypeAdapter(AgUiEvent)
"""Validates an event and gives the union's JSON Schema."""
