"""What every demo brain reads in a conversation: the current turn, the tool results, the task,
and how it finishes with a typed output."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from pydantic import BaseModel

from app.agents import FINISH_TOOL_NAME
from app.errors import RunError
from app.models import ModelRequest, ModelResponse, ToolCall
from app.protocol import Message, ToolMessage, UserMessage

Brain = Callable[[ModelRequest], ModelResponse]
"""A deterministic model function: the conversation in, the next response out."""

SchemaT = TypeVar("SchemaT", bound=BaseModel)


def current_turn(messages: Sequence[Message]) -> Sequence[Message]:
    """The messages from the latest user message on (a resumed session starts a new turn)."""
    for index in range(len(messages) - 1, -1, -1):
        if isinstance(messages[index], UserMessage):
            return messages[index:]
    return ()


def tool_results(messages: Sequence[Message]) -> dict[str, ToolMessage]:
    """The latest result of each tool called, by tool name."""
    return {message.tool_name: message for message in messages if isinstance(message, ToolMessage)}


def task_text(request: ModelRequest) -> str:
    """A child's task: its first user message (what its parent sent)."""
    first = next((m for m in request.messages if isinstance(m, UserMessage)), None)
    return first.content if first is not None else ""


def result(results: Mapping[str, ToolMessage], tool: str, schema: type[SchemaT]) -> SchemaT:
    """A tool's result as `schema`; a failed tool fails the agent with the tool's error, since a
    deterministic brain cannot rephrase its call the way a real model would."""
    message = results[tool]
    if message.error is not None:
        raise RunError(f"{tool} failed: {message.error}")
    return schema.model_validate(message.result)


def finish(text: str, output: BaseModel) -> ModelResponse:
    """Say `text` and finish with `output`."""
    return ModelResponse(
        text=text, tool_calls=[ToolCall(FINISH_TOOL_NAME, output.model_dump(mode="json"))]
    )
