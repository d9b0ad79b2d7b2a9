"""The brains of the briefing desk: `briefing-desk` delegates the seed-004 way, one background
`analyst` per topic, then follows the recommended flow: `subagent_wait` (no polling), and on
each notice `subagent_result` with the cached summary, until every analyst is read; `analyst`
looks its topic up and answers in the summary envelope."""

from __future__ import annotations

import re
from collections.abc import Sequence

from app.demo.names import ANALYST, BRIEFING_DESK, LOOKUP_TOPIC
from app.demo.research_brains import research_topics
from app.demo.schemas import Lookup
from app.demo.turns import current_turn, result, task_text, tool_results
from app.models import ModelRequest, ModelResponse, ToolCall
from app.protocol import Message, SystemMessage, ToolMessage, UserMessage

DESK_HELP = (
    "I brief you on topics from a small built-in library (solar power, wind power, "
    "hydropower, geothermal energy, batteries), with one analyst per topic working in the "
    'background. Ask me for example: "Research: solar power and wind power".'
)
"""The desk's answer to a message that asks for no briefing."""

_ENDED = re.compile(r"^- (?P<session>\S+) (?P<how>succeeded|failed|timed out)", re.MULTILINE)


def _updates(turn: Sequence[Message]) -> dict[str, str]:
    """The sessions the notices of this turn told of, with how each ended."""
    found: dict[str, str] = {}
    for message in turn:
        if isinstance(message, SystemMessage):
            for match in _ENDED.finditer(message.content):
                found[match["session"]] = match["how"]
    return found


def _read(turn: Sequence[Message]) -> dict[str, ToolMessage]:
    """The results read this turn (`subagent_result`), by session id."""
    calls = {
        call.id: call
        for message in turn
        for call in getattr(message, "tool_calls", ())
        if call.name == "subagent_result" and isinstance(call.arguments, dict)
    }
    return {
        str(calls[m.tool_call_id].arguments["session_id"]): m
        for m in turn
        if isinstance(m, ToolMessage) and m.tool_call_id in calls
    }


def desk_brain(request: ModelRequest) -> ModelResponse:
    """`briefing-desk`: launch, wait, read the summaries, report."""
    turn = current_turn(request.messages)
    message = turn[0].content if turn and isinstance(turn[0], UserMessage) else ""
    topics = research_topics(message)
    if not topics:
        return ModelResponse(text=DESK_HELP)
    launched = [
        m.result["session_id"]
        for m in turn
        if isinstance(m, ToolMessage) and m.tool_name == "subagent" and isinstance(m.result, dict)
    ]
    if not launched:
        return ModelResponse(
            text=f"I'll have an analyst look into each topic in the background: "
            f"{', '.join(topics)}.",
            tool_calls=[
                ToolCall("subagent", {"category": ANALYST, "prompt": topic, "background": True})
                for topic in topics
            ],
        )
    ended, read = _updates(turn), _read(turn)
    unread = [session for session in ended if session not in read]
    if unread:
        return ModelResponse(
            tool_calls=[
                ToolCall("subagent_result", {"session_id": s, "read_method": "summary"})
                for s in unread
            ]
        )
    if len(read) < len(launched):
        return ModelResponse(tool_calls=[ToolCall("subagent_wait", {})])
    lines = []
    for session in launched:
        payload = read[str(session)].result
        summary = payload.get("inline_content") if isinstance(payload, dict) else None
        lines.append(f"- {summary or 'no summary: ' + str(session)}")
    return ModelResponse(text="Your briefing:\n" + "\n".join(lines))


def analyst_brain(request: ModelRequest) -> ModelResponse:
    """`analyst`: look the topic up, then answer with a summary and the full result."""
    topic = task_text(request)
    results = tool_results(request.messages)
    if LOOKUP_TOPIC not in results:
        return ModelResponse(
            text=f"Looking up {topic}.",
            tool_calls=[ToolCall(LOOKUP_TOPIC, {"topic": topic, "limit": 4})],
        )
    found = result(results, LOOKUP_TOPIC, Lookup)
    if not found.facts:
        summary, full = f"The library has nothing on {topic}.", f"No facts on {topic}."
    else:
        summary = f"{found.topic}: {found.facts[0]}"
        full = "\n".join(f"- {fact}" for fact in found.facts)
    return ModelResponse(
        text="<subagent_background_result>\n"
        f"<summary>{summary}</summary>\n<full_result>{full}</full_result>\n"
        "</subagent_background_result>"
    )


DESK_BRAINS = {BRIEFING_DESK: desk_brain, ANALYST: analyst_brain}
"""The desk's brains by agent name."""
