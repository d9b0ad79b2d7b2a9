"""Folds a streamed OpenAI-compatible chat completion into what a step needs: its text pieces,
whole tool calls, a finish reason and usage. Apart from `OpenAIChatModel` (app/models/openai.py),
which builds the request, makes the call and translates its failures; this needs no SDK.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from app.models.base import Usage
from app.protocol import ToolCall


@dataclass(slots=True)
class _PartialCall:
    id: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class MalformedChunkError(ValueError):
    """A stream chunk that is not shaped like a `chat.completion.chunk`."""


class ResponseAssembler:
    """Folds streamed chunks into text pieces, whole tool calls, a finish reason and usage.

    Chunks are untrusted JSON: fields of an unexpected type are ignored rather than trusted.
    """

    __slots__ = ("_calls", "finish_reason", "usage")

    def __init__(self) -> None:
        self._calls: dict[int, _PartialCall] = {}
        self.finish_reason: str | None = None
        self.usage: Usage | None = None

    def feed(self, chunk: object) -> str:
        """Take in one chunk; return its text (empty when it has none)."""
        if not isinstance(chunk, dict):
            raise MalformedChunkError(f"expected a JSON object, got {type(chunk).__name__}")
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = Usage(
                input_tokens=_count(usage.get("prompt_tokens")),
                output_tokens=_count(usage.get("completion_tokens")),
            )
        text = ""
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            if isinstance(delta, dict):
                text += self._feed_delta(delta)
            finish_reason = choice.get("finish_reason")
            if isinstance(finish_reason, str):
                self.finish_reason = finish_reason
        return text

    def _feed_delta(self, delta: dict[str, object]) -> str:
        text = ""
        # A refusal is the text the model answers instead; the user should see it.
        for key in ("content", "refusal"):
            piece = delta.get(key)
            if isinstance(piece, str):
                text += piece
        parts = delta.get("tool_calls")
        for part in parts if isinstance(parts, list) else ():
            if not isinstance(part, dict):
                continue
            call = self._calls.setdefault(self._slot(part), _PartialCall())
            call_id = part.get("id")
            if isinstance(call_id, str) and call_id and call.id is None:
                call.id = call_id
            function = part.get("function")
            if isinstance(function, dict):
                name = function.get("name")
                # Some servers repeat the whole name in every delta: the first one wins.
                if isinstance(name, str) and name and not call.name:
                    call.name = name
                arguments = function.get("arguments")
                if isinstance(arguments, str):
                    call.arguments.append(arguments)
        return text

    def _slot(self, part: dict[str, object]) -> int:
        index = part.get("index")
        if isinstance(index, int):
            return index
        # A server that numbers nothing: a new id starts a call, anything else continues one.
        if not self._calls:
            return 0
        last = max(self._calls)
        call_id = part.get("id")
        if isinstance(call_id, str) and call_id and call_id != self._calls[last].id:
            return last + 1
        return last

    def tool_calls(self) -> list[ToolCall]:
        """The assembled tool calls, in the provider's order."""
        return [
            ToolCall(name=call.name, arguments=parse_arguments("".join(call.arguments)), id=call.id)
            for _, call in sorted(self._calls.items())
        ]


def _count(value: object) -> int:
    return value if isinstance(value, int) else 0


def parse_arguments(raw: str) -> dict[str, Any] | str:
    """A tool call's arguments as a JSON object, or the raw text when they are not one.

    The runtime turns raw text into a tool error the model can recover from. Empty arguments are
    an empty object: some servers stream nothing for a call without parameters.
    """
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return raw
    return value if isinstance(value, dict) else raw
