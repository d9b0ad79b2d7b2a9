"""The vocabulary of a run shared by the loop, delegation and the runtime: how a run ended, why
one is stopped, and what a parent can stop."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from pydantic import JsonValue

from app.protocol import AssistantMessage, Message, SessionStatus, ToolCall, ToolMessage

StopReason = Literal["interrupted", "timeout", "parent_suspended", "shutdown"]
"""Why a running session is being stopped from outside its loop."""


class Child(Protocol):
    """A running child a parent can stop: a local sub-agent's run, or a remote one's copier."""

    def stop(self, reason: StopReason, message: str | None = None) -> None:
        """Stop it (idempotent)."""


def unanswered_calls(messages: Sequence[Message]) -> list[ToolCall]:
    """The calls of the last model response that have no result yet, in call order."""
    answered: set[str] = set()
    for message in reversed(messages):
        if isinstance(message, ToolMessage):
            answered.add(message.tool_call_id)
        elif isinstance(message, AssistantMessage):
            return [call for call in message.tool_calls if call.id not in answered]
        else:
            return []
    return []


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a run of a session ended."""

    status: SessionStatus
    output: JsonValue = None
    error: str | None = None
    failure_reason: str | None = None


def stopped_outcome(reason: StopReason, message: str | None) -> Outcome:
    """How a session (or a child that never got to run) ends when it is stopped for `reason`."""
    if reason == "interrupted":
        return Outcome("interrupted", error=message)
    if reason == "parent_suspended":
        return Outcome(
            "failed",
            error=message or "The parent session suspended",
            failure_reason="parent_suspended",
        )
    return Outcome("failed", error=message or "Stopped")
