"""The one streaming interface every LLM model implements, and the request it receives."""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.protocol import Message, ToolCall


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as offered to a model: name, description and the JSON schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """What a model is asked: the conversation so far and the tools it may call."""

    session_id: str
    """The session asking; deterministic models key their scripts on it."""
    agent_type: str
    """The asking agent's type."""
    system_prompt: str
    """The agent's system prompt (empty for none)."""
    messages: Sequence[Message]
    """The conversation so far, oldest first."""
    tools: Sequence[ToolSpec]
    """The tools offered for this call."""
    step: int
    """The step this call makes (1-based)."""


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of streamed text."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallReady:
    """A whole tool call (streamed after the text)."""

    call: ToolCall


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens a call used (reported last)."""

    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True, slots=True)
class RetryStarted:
    """The call failed part-way and starts again: forget what it streamed so far."""

    attempt: int
    """The attempt that starts now (2 for the first retry)."""
    error: str
    """Why the previous attempt failed."""


ModelEvent = TextDelta | ToolCallReady | Usage | RetryStarted
"""What a model's stream yields: text deltas, then tool calls, then usage; `RetryStarted`
when a call is restarted after it had already streamed something."""


@dataclass(frozen=True, slots=True)
class ModelResponse:
    """A whole model response, as the deterministic models play it."""

    text: str = ""
    tool_calls: Sequence[ToolCall] = field(default_factory=tuple)
    usage: Usage | None = None


async def close_stream(events: AsyncIterator[ModelEvent] | None) -> None:
    """Finish an abandoned event stream now (an async generator's `finally`, closing its HTTP
    response), not whenever the garbage collector gets to it."""
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        await aclose()


class Model(abc.ABC):
    """An LLM: one async streaming call per step."""

    @property
    def name(self) -> str:
        """A short name for logs and errors."""
        return type(self).__name__

    @abc.abstractmethod
    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Answer `request`: yield text deltas, then tool calls, then usage.

        Cancelling the iteration (an interrupt) must stop the call at once.
        """
