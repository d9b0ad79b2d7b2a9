"""The brains of the research tree: `research-lead` keeps persistent `researcher` children
(blocking: a spawn's result is the child's output) and a `topics` digest running in the
background (non-blocking: its end arrives as a notice), all through the companion tools."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from app.agents.companion import TOOL_NAMES
from app.demo.names import LOOKUP_TOPIC, RESEARCH_LEAD, RESEARCHER, TOPICS
from app.demo.schemas import Findings, Lookup, Topics
from app.demo.turns import Brain, current_turn, finish, result, task_text, tool_results
from app.models import ModelRequest, ModelResponse, ToolCall
from app.protocol import AssistantMessage, Message, SystemMessage, ToolMessage, UserMessage

SPAWN, LIST, TERMINATE = TOOL_NAMES["spawn"], TOOL_NAMES["list"], TOOL_NAMES["terminate"]

MAX_TOPICS = 3
"""Researchers the lead puts on one request, at most."""

RESEARCH_HELP = (
    "I lead a team of researchers who look topics up in a small built-in library (solar "
    "power, wind power, hydropower, geothermal energy, batteries). Ask me for example: "
    '"Research: solar power and wind power". Later, ask what they are doing, or tell me '
    "we are done and I will let them go."
)
"""The lead's answer to a message that asks for no research while it has no researchers."""

_REQUEST = re.compile(
    r"^\s*(?:please\s+)?(?:research|look\s+up|find\s+out\s+about|tell\s+me\s+about)\b\s*:?\s*",
    re.IGNORECASE,
)
_SPLIT = re.compile(r"\s*(?:,|;|\band\b)\s*", re.IGNORECASE)
_DISMISS = re.compile(r"\b(?:done|thanks|thank you|stop|terminate|wrap|bye|finish)", re.IGNORECASE)
_NOTICE = re.compile(
    r"^Persistent child '(?P<name>[^']+)' \((?P<agent>[^,]+), session \S+\) completed\. "
    r"Its output: (?P<output>.*)$",
    re.DOTALL,
)


def research_topics(message: str) -> list[str]:
    """The topics a message asks to research ("Research: a, b and c"), at most `MAX_TOPICS`
    with distinct names; none when it asks for no research."""
    asked = _REQUEST.match(message)
    if asked is None:
        return []
    topics: dict[str, str] = {}
    for piece in _SPLIT.split(message[asked.end() :]):
        topic = piece.strip(" .?!\n\t")
        if topic and child_name(topic) not in topics:
            topics[child_name(topic)] = topic
    return list(topics.values())[:MAX_TOPICS]


def child_name(topic: str) -> str:
    """The researcher's name for a topic: its words, lower case, joined by '-'."""
    return re.sub(r"[^a-z0-9]+", "-", topic.lower()).strip("-")[:40] or "topic"


@dataclass(frozen=True)
class Made:
    """A call the lead made this turn, and its answer."""

    call: ToolCall
    answer: ToolMessage | None

    def argument(self, key: str) -> Any:
        return self.call.arguments.get(key) if isinstance(self.call.arguments, dict) else None


def steps(turn: Sequence[Message]) -> list[list[Made]]:
    """The lead's steps this turn: each one's calls with their answers."""
    answers = {m.tool_call_id: m for m in turn if isinstance(m, ToolMessage)}
    return [
        [Made(call, answers.get(call.id or "")) for call in message.tool_calls]
        for message in turn
        if isinstance(message, AssistantMessage)
    ]


def digests(messages: Sequence[Message]) -> list[tuple[str, Topics]]:
    """The digests the lead heard of in notices, with their children's names."""
    found = []
    for message in messages:
        notice = _NOTICE.match(message.content) if isinstance(message, SystemMessage) else None
        if notice is None or notice["agent"] != TOPICS:
            continue
        try:
            found.append((notice["name"], Topics.model_validate(json.loads(notice["output"]))))
        except (ValueError, ValidationError):
            continue
    return found


def research_lead_brain(request: ModelRequest) -> ModelResponse:
    """`research-lead`: on a research request, spawn a researcher per topic, ask the first one
    with more to tell a follow-up while a digest of the facts runs in the background, then
    report; otherwise list its children, and let them go when told we are done."""
    turn = current_turn(request.messages)
    message = turn[0].content if turn and isinstance(turn[0], UserMessage) else ""
    done = steps(turn)
    topics = research_topics(message)
    if topics:
        return _research(topics, done, turn)
    if not any(isinstance(m, ToolMessage) and m.tool_name == SPAWN for m in request.messages):
        return ModelResponse(text=RESEARCH_HELP)
    return _wrap_up(bool(_DISMISS.search(message)), done, turn)


def _research(
    topics: list[str], done: list[list[Made]], messages: Sequence[Message]
) -> ModelResponse:
    if not done:
        return ModelResponse(
            text=f"I'll put a researcher on each topic: {', '.join(topics)}.",
            tool_calls=[_spawn(RESEARCHER, topic, child_name(topic)) for topic in topics],
        )
    found = {made.argument("name"): _findings(made) for made in done[0]}
    if len(done) == 1:
        more = next((n for n, f in found.items() if isinstance(f, Findings) and f.remaining), None)
        facts = [fact for f in found.values() if isinstance(f, Findings) for fact in f.facts]
        calls = []
        if more is not None:
            topic = found[more]
            assert isinstance(topic, Findings)
            question = f"Anything more on {topic.topic}? Tell me what you have not told me yet."
            calls.append(_spawn(RESEARCHER, question, more))
        if facts:
            calls.append(_spawn(TOPICS, " ".join(facts)))
        if calls:
            return ModelResponse(
                text="Thanks. One follow-up, and a digest of the facts in the background.",
                tool_calls=calls,
            )
    more_found = {made.argument("name"): _findings(made) for made in done[1]} if done[1:] else {}
    return ModelResponse(text=research_report(found, more_found, messages))


def _spawn(agent: str, message: str, name: str | None = None) -> ToolCall:
    arguments = {"agent": agent, "initialMessage": message}
    return ToolCall(SPAWN, arguments if name is None else {**arguments, "name": name})


def _findings(made: Made) -> Findings | str:
    if made.answer is None:
        return "no answer"
    if made.answer.error is not None:
        return made.answer.error
    try:
        return Findings.model_validate(made.answer.result)
    except ValidationError:
        return "its output did not match its schema"


def research_report(
    found: Mapping[str, Findings | str],
    more: Mapping[str, Findings | str],
    messages: Sequence[Message],
) -> str:
    """The lead's report: each researcher's facts (with its follow-up's), and the digest if
    its notice came this turn (`messages`), else that it will come."""
    lines = ["Here is what my researchers found."]
    for name, findings in found.items():
        if isinstance(findings, str):
            lines.append(f"- {name}: failed ({findings}).")
            continue
        facts = list(findings.facts)
        followed = more.get(name)
        if isinstance(followed, Findings):
            facts += followed.facts
        if findings.found is None:
            lines.append(f"- {name}: the library has nothing on {findings.topic}.")
        else:
            lines.append(f"- {name} ({findings.found}): {' '.join(facts)}")
    heard = digests(messages)
    if heard:
        lines += [_digest_line(name, digest) for name, digest in heard]
    elif any(isinstance(f, Findings) and f.facts for f in found.values()):
        lines.append("A digest of these facts is being made in the background: ask me later.")
    return "\n".join(lines)


def _digest_line(name: str, digest: Topics) -> str:
    return f"Digest ({name}): about {', '.join(digest.topics)}. In a sentence: {digest.summary}"


def _wrap_up(dismiss: bool, done: list[list[Made]], messages: Sequence[Message]) -> ModelResponse:
    if not done:
        return ModelResponse(
            text="Let me see where my researchers are.", tool_calls=[ToolCall(LIST, {})]
        )
    listed = done[0][0].answer
    children = (
        listed.result.get("children", []) if listed and isinstance(listed.result, dict) else []
    )
    if dismiss and len(done) == 1:
        alive = [child["name"] for child in children if child.get("status") != "terminated"]
        if alive:
            return ModelResponse(
                text="We are done: I'll let them go.",
                tool_calls=[ToolCall(TERMINATE, {"name": name}) for name in alive],
            )
    if done[1:]:
        gone = [made.argument("name") for made in done[1] if made.answer and not made.answer.error]
        lines = [f"We are done: I terminated {', '.join(gone)}."]
    else:
        lines = ["My children:"]
        lines += [f"- {c['name']} ({c['agentType']}): {c['status']}" for c in children]
    lines += [_digest_line(name, digest) for name, digest in digests(messages)]
    return ModelResponse(text="\n".join(lines))


def researcher_brain(request: ModelRequest) -> ModelResponse:
    """`researcher`: look its topic up from the first fact it has not reported yet (its memory
    is its conversation), then finish with what it found."""
    topic = task_text(request)
    turn = current_turn(request.messages)
    results = tool_results(turn)
    if LOOKUP_TOPIC not in results:
        told = sum(
            len(Lookup.model_validate(m.result).facts)
            for m in request.messages[: len(request.messages) - len(turn)]
            if isinstance(m, ToolMessage) and m.tool_name == LOOKUP_TOPIC and m.error is None
        )
        text = (
            f"I'll look {topic} up in the library."
            if not told
            else f"I'll look for what I have not told you yet: {told} facts in."
        )
        arguments = {"topic": topic, "offset": told, "limit": 2}
        return ModelResponse(text=text, tool_calls=[ToolCall(LOOKUP_TOPIC, arguments)])
    found = result(results, LOOKUP_TOPIC, Lookup)
    return finish(
        f"{len(found.facts)} facts found, {found.remaining} more in the library.",
        Findings(topic=topic, found=found.topic, facts=found.facts, remaining=found.remaining),
    )


RESEARCH_BRAINS: Mapping[str, Brain] = {
    RESEARCH_LEAD: research_lead_brain,
    RESEARCHER: researcher_brain,
}
"""Each agent of the research tree's brain, by agent name (`topics` is the text tree's)."""
