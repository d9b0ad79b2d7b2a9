"""One model call of a step: the model's streamed answer, its text emitted as it comes, folded
into the response the step commits (text, tool calls with ids unique in the session, usage).

What a model says is outside the server's control: its text and arguments are cleaned for every
store, and its call ids are kept only where they are new and plain (`app.ids.assign_call_ids`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import assert_never

from app import observability
from app.ids import assign_call_ids
from app.models import Model, ModelRequest, RetryStarted, TextDelta, ToolCallReady, Usage
from app.models.base import close_stream
from app.protocol import AssistantMessage, ToolCall
from app.protocol.values import clean_json, clean_text, is_clean


@dataclass(frozen=True, slots=True)
class Answer:
    """What a model call answered."""

    response: AssistantMessage
    """The response as the conversation keeps it."""
    usage: Usage | None
    """The tokens it used, if the model said."""


async def call_model(
    model: Model,
    request: ModelRequest,
    *,
    used_ids: set[str],
    responses: int,
    on_text: Callable[[str], None],
    on_retry: Callable[[], None],
) -> Answer:
    """Stream `model`'s answer to `request`: each text delta goes to `on_text` as it comes (a
    retried call's to `on_retry` first); the response's call ids are made unique among
    `used_ids` (which receives them), those without one numbered by `responses`, the count of
    responses the conversation holds."""
    text: list[str] = []
    calls: list[ToolCall] = []
    usage = None
    events = model.stream(request)
    observed = observability.model_call()
    try:
        async for event in events:
            if isinstance(event, TextDelta):
                if event.text:
                    delta = clean_text(event.text)
                    text.append(delta)
                    on_text(delta)
            elif isinstance(event, ToolCallReady):
                calls.append(event.call)
            elif isinstance(event, Usage):
                usage = event
            elif isinstance(event, RetryStarted):
                text, calls, usage = [], [], None
                on_retry()
            else:
                assert_never(event)
    finally:
        # A failure here closes the model's stream (its HTTP response) at once.
        await close_stream(events)
        observed.ended(usage)
    identified = identified_calls(calls, used_ids, responses)
    response = AssistantMessage.trusted({"content": "".join(text), "tool_calls": identified})
    return Answer(response, usage)


def identified_calls(
    calls: list[ToolCall], used_ids: set[str], responses: int
) -> tuple[ToolCall, ...]:
    """The calls with ids unique in the session (the model's own kept in `original_id` where it
    was replaced) and values every store holds."""
    ids = assign_call_ids([call.id for call in calls], used_ids, responses)
    return tuple(
        call
        if call.id == call_id and is_clean(call.name) and is_clean(call.arguments)
        else ToolCall.trusted(
            {
                "name": clean_text(call.name),
                "arguments": clean_json(call.arguments),
                "id": call_id,
                "original_id": None if call.id in (call_id, None) else clean_text(call.id),
            }
        )
        for call, call_id in zip(calls, ids, strict=True)
    )
