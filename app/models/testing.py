"""Deterministic models for tests and demos: a script played per session, or a Python function."""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from app.errors import DefinitionError, ScriptExhaustedError, ToolNotOfferedError
from app.models.base import (
    Model,
    ModelEvent,
    ModelRequest,
    ModelResponse,
    TextDelta,
    ToolCallReady,
)

_WORDS = re.compile(r"\S+\s*|\s+")


def _text_deltas(text: str) -> list[str]:
    """Split text into word-sized deltas, as a provider would stream it."""
    return _WORDS.findall(text)


async def play_response(
    response: ModelResponse, request: ModelRequest, latency: float
) -> AsyncIterator[ModelEvent]:
    """Stream `response` as events, spending `latency` seconds spread over its text deltas."""
    offered = {tool.name for tool in request.tools}
    for call in response.tool_calls:
        if call.name not in offered:
            raise ToolNotOfferedError(
                f"The model called tool {call.name!r}, which was not offered to agent "
                f"{request.agent_type!r} (offered: {', '.join(sorted(offered)) or 'none'})"
            )
    deltas = _text_deltas(response.text)
    if latency > 0:
        pause = latency / max(len(deltas), 1)
        if not deltas:
            await asyncio.sleep(pause)
    for delta in deltas:
        if latency > 0:
            await asyncio.sleep(pause)
        yield TextDelta(delta)
    for call in response.tool_calls:
        yield ToolCallReady(call)
    if response.usage is not None:
        yield response.usage


def _check_latency(latency: float) -> float:
    if latency < 0:
        raise DefinitionError(f"latency must be >= 0, got {latency}")
    return latency


class ScriptedModel(Model):
    """Plays `responses` in order; every session plays the script from its start.

    A session's position in the script is the number of assistant messages in its conversation, so
    parallel sessions are deterministic and a replayed step gets the same response.
    """

    def __init__(self, responses: Sequence[ModelResponse], *, latency: float = 0.0) -> None:
        self.responses = tuple(responses)
        self.latency = _check_latency(latency)

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Play the session's next scripted response."""
        position = sum(1 for message in request.messages if message.role == "assistant")
        if position >= len(self.responses):
            raise ScriptExhaustedError(
                f"ScriptedModel has no response left for session {request.session_id!r} "
                f"(agent {request.agent_type!r}): its script of {len(self.responses)} "
                f"response(s) is used up"
            )
        return play_response(self.responses[position], request, self.latency)


ModelFunction = Callable[[ModelRequest], ModelResponse | Awaitable[ModelResponse]]
"""A function that answers a model request, sync or async."""


class FunctionModel(Model):
    """Answers each request with `fn(request)`, sync or async."""

    def __init__(self, fn: ModelFunction, *, latency: float = 0.0) -> None:
        if not callable(fn):
            raise DefinitionError("FunctionModel needs a callable")
        self.fn = fn
        self.latency = _check_latency(latency)

    @property
    def name(self) -> str:
        """The function's name."""
        return f"FunctionModel({getattr(self.fn, '__name__', 'fn')})"

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Call the function, then stream its response."""
        response = self.fn(request)
        if inspect.isawaitable(response):
            response = await response
        if not isinstance(response, ModelResponse):
            raise TypeError(
                f"{self.name} returned {type(response).__name__}, expected a ModelResponse"
            )
        async for event in play_response(response, request, self.latency):
            yield event
