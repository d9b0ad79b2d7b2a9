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
    """The call id; the runtime assigns a deterministic one when the model gives none."""

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
    content: str
    """The text."""


class AssistantMessage(WireModel):
    """One model response: its text and the tool calls it asked for."""

    role: Literal["assistant"] = "assistant"
    content: str = ""
    """The streamed text."""
    tool_calls: tuple[ToolCall, ...] = ()
    """The tool calls, each with its id."""


class ToolMessage(WireModel):
    """The result of one tool call, as the model reads it on its next step."""

    role: Literal["tool"] = "tool"
    tool_call_id: str
    """The call this answers."""
    tool_name: str
    """The tool that was called."""
    result: Json = None
    """The tool's JSON result (for a failed sub-agent `{"success": false, "error": ...}`)."""
    error: str | None = None
    """The error message when the call failed; null on success."""


Message = Annotated[UserMessage | AssistantMessage | ToolMessage, Field(discriminator="role")]
"""Any conversation message."""

MESSAGE_ADAPTER: TypeAdapter[Message] = TypeAdapter(Message)
"""Validates and serialises a `Message`."""
