"""Conversation messages as the store keeps them and the models read them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter

from app.protocol._base import Json, WireModel


class ToolCall(WireModel):
    """A tool call requested by a model."""

    name: str
    """The tool's name as offered to the model."""
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    """The arguments: a JSON object, or the raw text when the model produced invalid JSON."""
    id: str | None = None
    """The call id, unique within the session: the model's own id when it is new and plain, else
    one the runtime derives deterministically (see `app.ids.assign_call_ids`)."""
    original_id: str | None = None
    """The id the model gave the call, when the runtime gave it another one; the conversation
    sent back to the model uses it, so the model sees the ids it made."""

    def __init__(
        self,
        name: str | None = None,
        arguments: dict[str, Any] | str | None = None,
        id: str | None = None,
        **data: Any,
    ) -> None:
        if name is not None:
            data["name"] = name
        if arguments is not None:
            data["arguments"] = arguments
        if id is not None:
            data["id"] = id
        super().__init__(**data)


class UserMessage(WireModel):
    """A user's message (also how a sub-agent receives its input)."""

    role: Literal["user"] = "user"
    """`user`: a user (or, for a sub-agent, its caller)."""
    content: str
    """The text."""


class SystemMessage(WireModel):
    """A notice from the runtime to the model, in the conversation (a persistent child that
    ended, say)."""

    role: Literal["system"] = "system"
    """`system`: the runtime."""
    content: str
    """The text."""


class AssistantMessage(WireModel):
    """One model response: its text and the tool calls it asked for."""

    role: Literal["assistant"] = "assistant"
    """`assistant`: the model."""
    content: str = ""
    """The streamed text."""
    tool_calls: tuple[ToolCall, ...] = ()
    """The tool calls, each with its id."""


class ToolMessage(WireModel):
    """The result of one tool call, as the model reads it on its next step."""

    role: Literal["tool"] = "tool"
    """`tool`: a tool's result."""
    tool_call_id: str
    """The call this answers."""
    tool_name: str
    """The tool that was called."""
    result: Json = None
    """The tool's JSON result (for a failed sub-agent `{"success": false, "error": ...}`)."""
    error: str | None = None
    """The error message when the call failed; null on success."""


Message = Annotated[
    UserMessage | SystemMessage | AssistantMessage | ToolMessage, Field(discriminator="role")
]
"""Any conversation message."""

MESSAGE_ADAPTER: TypeAdapter[Message] = TypeAdapter(Message)
"""Validates and serialises a `Message`."""
