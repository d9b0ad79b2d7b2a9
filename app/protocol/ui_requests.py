"""What the standard UI clients send: the AI SDK's chat request and AG-UI's `RunAgentInput`.

Their shapes belong to those projects, which add fields over time: unknown keys are allowed,
and only what the server uses is declared. Lists are not counted: the body limit
(`MAX_BODY_BYTES`, a 413) bounds them, as it bounds every body.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from annotated_types import Ge, Le
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

from app.protocol.values import MAX_JSON_NUMBER, JsonValue, SessionId


class _Open(BaseModel):
    # By alias only: `agent_type` is an unknown key, as the document says, not `agentType`.
    model_config = ConfigDict(
        extra="allow",
        validate_by_name=False,
        validate_by_alias=True,
        use_attribute_docstrings=True,
    )


class UIMessageIn(_Open):
    """A message of the AI SDK's `UIMessage` shape."""

    id: str = Field(max_length=500)
    """The message's id."""
    role: Literal["system", "user", "assistant"]
    """Who wrote it."""
    parts: list[dict[str, Any]]
    """Its parts: `{"type": "text", "text"}`, tool parts with their `state`, `output`,
    `approval`, data parts."""


class ChatRequest(_Open):
    """`POST /ai-sdk/chat`: what `DefaultChatTransport` sends, plus the agent to run."""

    id: SessionId
    """The chat's id: the session's id."""
    messages: list[UIMessageIn]
    """The whole chat; the server keeps its own conversation and reads only the last message:
    a user message's text parts (a new chat needs one), or the answers in the tool parts of
    the assistant message that a paused session asked them in."""
    agent_type: str = Field(alias="agentType", min_length=1, max_length=200)
    """The chat's agent (`GET /agents`), set with the transport's `body`: it starts a new
    chat, and an existing chat runs it already (another agent is a 409)."""
    trigger: Literal["submit-message", "regenerate-message"] = "submit-message"
    """Why the client sends the request (a new message, or one regenerated)."""
    message_id: str | None = Field(None, alias="messageId", max_length=500)
    """The message to regenerate, with `regenerate-message`."""


class AgUiMessage(_Open):
    """A message of AG-UI's `Message` union (user, assistant, tool, ...)."""

    id: str = Field(max_length=500)
    """The message's id."""
    role: str = Field(max_length=50)
    """Who wrote it: `user`, `assistant`, `tool`, ..."""
    content: Any = None
    """Text, or a list of content parts (their `text` parts are read)."""
    tool_call_id: str | None = Field(None, alias="toolCallId", max_length=500)
    """For a `tool` message, the call it answers."""


class AgUiResume(_Open):
    """An answer to an interrupt of the previous run."""

    interrupt_id: str = Field(alias="interruptId", max_length=500)
    """The interrupt it answers: the pending call id."""
    status: Literal["resolved", "cancelled"]
    """`resolved` with a payload, or `cancelled` (a refusal)."""
    payload: JsonValue = None
    """A client tool's result; for an approval `true`/`false` or `{"approved": bool}`."""


def _json_integer(value: Any) -> Any:
    # What JSON Schema calls an integer: a number without a fractional part (`3.0` is one),
    # never a boolean or a string, which pydantic's lax mode would read as numbers.
    if isinstance(value, bool | str):
        raise PydanticCustomError("int_type", "Input should be a valid integer")
    return value


Sequence = Annotated[int, Ge(0), Le(MAX_JSON_NUMBER), BeforeValidator(_json_integer)]
"""A stream sequence in a JSON body: a JSON integer, 0 to `MAX_JSON_NUMBER` (not
`MAX_SEQUENCE`, which is no double: a validator that compares numbers as doubles would take
2^63 + 191 as within it; no stream gets near either)."""


class ForwardedProps(_Open):
    """`forwardedProps`: what the client passes on to the agent; the server reads one key."""

    from_sequence: Sequence | None = Field(None, alias="fromSequence")
    """Follow the thread's current run after this sequence instead of starting a run: where a
    cut connection left off (the last event's `metadata.sequence`)."""


class RunAgentInput(_Open):
    """`POST /ag-ui/{agentType}`: what `HttpAgent` sends."""

    thread_id: SessionId = Field(alias="threadId")
    """The thread: the session's id."""
    run_id: str = Field(alias="runId", max_length=500)
    """The client's id for this run."""
    messages: list[AgUiMessage]
    """The thread as the client has it; the server reads its last user message (a new
    thread needs one)."""
    resume: list[AgUiResume] | None = None
    """Answers to the interrupts that ended the previous run."""
    forwarded_props: ForwardedProps | None = Field(None, alias="forwardedProps")
    """`{"fromSequence": N}` follows the thread's run after sequence N instead of starting one."""


def text_of(parts: list[dict[str, Any]]) -> str:
    """The text of AI SDK message parts."""
    return "".join(str(part.get("text", "")) for part in parts if part.get("type") == "text")


def content_text(content: Any) -> str:
    """The text of an AG-UI message's content (a string, or parts with `text`)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""
