"""The deterministic "brains" that drive the demo's agents when no real model is configured.

Each is a `FunctionModel` function that decides from the conversation, as a model would: on its
first step it says in a sentence what it will do and calls its tools (or delegates); once the
results are in, it finishes with the typed output built from them, and the coordinator writes its
report from its children's outputs. They call the same tools a real model is offered, so the
stream looks the same whichever drives the agents.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from pydantic import ValidationError

from app.demo.analysis import words
from app.demo.desk_brains import DESK_BRAINS
from app.demo.names import (
    COORDINATOR,
    COUNT_TEXT,
    EXTRACT_KEYWORDS,
    KEY_SENTENCES,
    KEYWORDS,
    READABILITY,
    SCORE_SENTIMENT,
    SENTIMENT,
    SPECIALISTS,
    TEXT_STATS,
    TOPICS,
    subagent_tool,
)
from app.demo.research_brains import RESEARCH_BRAINS
from app.demo.schemas import (
    MAX_TEXT_CHARS,
    KeySentences,
    Keywords,
    Readability,
    SentimentScore,
    TextCounts,
    TextStats,
    Topics,
)
from app.demo.trip_brains import TRIP_BRAINS
from app.demo.turns import (
    Brain,
    SchemaT,
    current_turn,
    finish,
    result,
    task_text,
    tool_results,
)
from app.models import ModelRequest, ModelResponse, ToolCall
from app.protocol import ToolMessage, UserMessage

MIN_WORDS = 3
"""Fewer words than this is not a text to analyse (a greeting, "help", an empty message)."""

HELP = (
    "I analyse a text with a team of specialists: text-stats counts words and sentences and "
    "scores readability, sentiment judges the tone, and topics (with the help of a keywords "
    "agent) finds what it is about. Send me a few sentences to analyse, for example: "
    '"Analyse: The garden is beautiful in spring. Sadly, the old gate is broken."'
)
"""The coordinator's answer when the message holds no text to analyse."""

TOO_LONG = (
    f"That text is too long for this demo: send at most {MAX_TEXT_CHARS:,} characters "
    "and I will analyse it."
)
"""The coordinator's answer to a text over `MAX_TEXT_CHARS`."""

PLAN = (
    "I'll hand this text to three specialists at once: text-stats for length and readability, "
    "sentiment for tone, and topics for what it is about."
)
"""What the coordinator says as it delegates."""

_INSTRUCTION = re.compile(
    r"^\s*(?:please\s+)?(?:analy[sz]e|review|check|examine|assess|read|text)\b[^:\n]{0,60}:\s*",
    re.IGNORECASE,
)
_GREETING = re.compile(
    r"^\s*(?:help|hi|hello|hey|usage|what can you do|what do you do|how does this work)\b",
    re.IGNORECASE,
)


def text_to_analyse(message: str) -> str | None:
    """The text a user message asks to analyse, without an instruction in front of it
    ("Analyse this: ..."); None for a greeting, a request for help or a text too short."""
    text = _INSTRUCTION.sub("", message, count=1).strip()
    count = len(words(text))
    if count < MIN_WORDS or (_GREETING.match(message) and count < 8):
        return None
    return text


# -- the coordinator -------------------------------------------------------------------------------


def coordinator_brain(request: ModelRequest) -> ModelResponse:
    """`text-analyst`: delegate the text to the three specialists at once, then report; or explain
    what to send when the message holds no text."""
    turn = current_turn(request.messages)
    results = tool_results(turn)
    if results:
        return ModelResponse(text=write_report(results))
    message = turn[0].content if turn and isinstance(turn[0], UserMessage) else ""
    text = text_to_analyse(message)
    if text is None:
        return ModelResponse(text=HELP)
    if len(text) > MAX_TEXT_CHARS:
        return ModelResponse(text=TOO_LONG)
    return ModelResponse(
        text=PLAN,
        tool_calls=[ToolCall(subagent_tool(name), {"text": text}) for name in SPECIALISTS],
    )


def _child_output(
    results: Mapping[str, ToolMessage], agent: str, schema: type[SchemaT]
) -> SchemaT | str:
    """A child's typed output, or why there is none."""
    message = results.get(subagent_tool(agent))
    if message is None:
        return "no answer"
    if message.error is not None:
        return message.error
    try:
        return schema.model_validate(message.result)
    except ValidationError:
        return "its output did not match its schema"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _terms(terms: list[str]) -> str:
    return ", ".join(terms) if terms else "none"


def write_report(results: Mapping[str, ToolMessage]) -> str:
    """The coordinator's short report from its children's results (by tool name); a child that
    failed gets a line saying so."""
    lines = ["Here is what my specialists found."]
    stats = _child_output(results, TEXT_STATS, TextStats)
    if isinstance(stats, str):
        lines.append(f"Length and readability: unavailable ({stats}).")
    else:
        lines.append(
            f"Length: {_plural(stats.words, 'word')} in {_plural(stats.sentences, 'sentence')}, "
            f"{stats.average_sentence_length:g} words per sentence."
        )
        lines.append(
            f"Readability: Flesch reading ease {stats.flesch_reading_ease:g}, "
            f"{stats.reading_level} (grade {stats.flesch_kincaid_grade:g})."
        )
    sentiment = _child_output(results, SENTIMENT, SentimentScore)
    if isinstance(sentiment, str):
        lines.append(f"Sentiment: unavailable ({sentiment}).")
    else:
        lines.append(
            f"Sentiment: {sentiment.label} (score {sentiment.score:g}); "
            f"positive terms: {_terms(sentiment.positive)}; "
            f"negative terms: {_terms(sentiment.negative)}."
        )
    topics = _child_output(results, TOPICS, Topics)
    if isinstance(topics, str):
        lines.append(f"Topics: unavailable ({topics}).")
    else:
        lines.append(f"Topics: {_terms(topics.topics)}.")
        lines.append(f"Summary: {topics.summary}")
    return "\n".join(lines)


# -- the specialists -------------------------------------------------------------------------------


def text_stats_brain(request: ModelRequest) -> ModelResponse:
    """`text-stats`: call `count_text` and `readability` together, then finish with both."""
    results = tool_results(request.messages)
    if not results:
        text = task_text(request)
        return ModelResponse(
            text="I'll count the words and sentences and score the readability, both at once.",
            tool_calls=[
                ToolCall(COUNT_TEXT, {"text": text}),
                ToolCall(READABILITY, {"text": text}),
            ],
        )
    counts = result(results, COUNT_TEXT, TextCounts)
    scores = result(results, READABILITY, Readability)
    return finish(
        f"{counts.words} words with a reading ease of {scores.flesch_reading_ease:g}: "
        f"{scores.reading_level}.",
        TextStats(**counts.model_dump(), **scores.model_dump()),
    )


def sentiment_brain(request: ModelRequest) -> ModelResponse:
    """`sentiment`: call `score_sentiment`, then finish with its verdict."""
    results = tool_results(request.messages)
    if not results:
        return ModelResponse(
            text="I'll score the tone with the sentiment lexicon.",
            tool_calls=[ToolCall(SCORE_SENTIMENT, {"text": task_text(request)})],
        )
    verdict = result(results, SCORE_SENTIMENT, SentimentScore)
    return finish(f"The tone is {verdict.label} (score {verdict.score:g}).", verdict)


def topics_brain(request: ModelRequest) -> ModelResponse:
    """`topics`: delegate to `keywords`, then pick the sentence that covers them best, then
    finish with the top three keywords as topics and that sentence as summary."""
    results = tool_results(request.messages)
    text = task_text(request)
    if not results:
        return ModelResponse(
            text="I'll have the keywords agent find the most frequent content words first.",
            tool_calls=[ToolCall(subagent_tool(KEYWORDS), {"text": text})],
        )
    found = [
        keyword.word for keyword in result(results, subagent_tool(KEYWORDS), Keywords).keywords
    ]
    if KEY_SENTENCES not in results:
        reason = (
            f"The top keywords are {', '.join(found[:3])}; now I'll pick the sentence that "
            "covers them best."
            if found
            else "There are no content words to go on, so I'll take the opening sentence."
        )
        return ModelResponse(
            text=reason,
            tool_calls=[ToolCall(KEY_SENTENCES, {"text": text, "keywords": found, "limit": 1})],
        )
    summary = " ".join(result(results, KEY_SENTENCES, KeySentences).sentences)
    return finish(
        "Done: the topics and a one-sentence summary.", Topics(topics=found[:3], summary=summary)
    )


def keywords_brain(request: ModelRequest) -> ModelResponse:
    """`keywords`: call `extract_keywords` for the top five, then finish with them."""
    results = tool_results(request.messages)
    if not results:
        return ModelResponse(
            text="I'll count the content words, leaving out stop words.",
            tool_calls=[ToolCall(EXTRACT_KEYWORDS, {"text": task_text(request), "top_n": 5})],
        )
    found = result(results, EXTRACT_KEYWORDS, Keywords)
    return finish(f"Found {_plural(len(found.keywords), 'keyword')}.", found)


BRAINS: Mapping[str, Brain] = {
    COORDINATOR: coordinator_brain,
    TEXT_STATS: text_stats_brain,
    SENTIMENT: sentiment_brain,
    TOPICS: topics_brain,
    KEYWORDS: keywords_brain,
    **TRIP_BRAINS,
    **RESEARCH_BRAINS,
    **DESK_BRAINS,
}
"""Each demo agent's brain, by agent name: the text tree's above, the trips and research
trees' from their modules."""
