"""The vocabulary of a run shared by the loop, children and the runtime: how a run ended, why
one is stopped, and what is still to be answered in a conversation."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import JsonValue

from app.protocol import AssistantMessage, Message, SessionStatus, ToolCall, ToolMessage

StopReason = Literal["interrupted", "timeout", "parent_suspended", "terminated", "shutdown"]
"""Why a running session is stopped from outside its loop. `terminated`: its parent ended a
persistent child for good. `shutdown` gives the run up without a write (the process stops, or
lost the session's lease), as a crash would."""


@dataclass(frozen=True, slots=True)
class Stop:
    """A request to stop a running session, and why."""

    reason: StopReason
    message: str | None = None


SUSPENDED = Stop("parent_suspended", "The parent session suspended")
"""The stop of the children still running when their parent pauses for the client."""

SHUTDOWN = Stop("shutdown")
"""The stop of a run this process gives up without a write."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a run of a session ended."""

    status: SessionStatus
    output: JsonValue = None
    error: str | None = None
    failure_reason: str | None = None


def stopped_outcome(stop: Stop) -> Outcome:
    """How a session (or a child that never got to run) ends when it is stopped."""
    if stop.reason == "interrupted":
        return Outcome("interrupted", error=stop.message)
    if stop.reason == "terminated":
        return Outcome("terminated", error=stop.message)
    if stop.reason == "parent_suspended":
        return Outcome(
            "failed",
            error=stop.message or "The parent session suspended",
            failure_reason="parent_suspended",
        )
    if stop.reason == "timeout":
        return Outcome("failed", error=stop.message or "Timed out", failure_reason="timeout")
    return Outcome("failed", error=stop.message or "Stopped")


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
