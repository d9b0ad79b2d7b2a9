"""The demo's analysis and tools give the hand-computed answers, and validate their input."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from app.agents import Tool, ToolContext
from app.demo import analysis, tools
from app.demo.schemas import (
    MAX_TEXT_CHARS,
    KeySentencesInput,
    KeywordCount,
    KeywordsInput,
    SentimentScore,
    TextInput,
)
from tests.demo.sample import (
    COUNTS,
    KEY_SENTENCES,
    KEYWORDS,
    READABILITY,
    S1,
    S2,
    S3,
    S4,
    SAMPLE,
    SENTIMENT,
)


def test_words_keep_inner_apostrophes_and_numbers() -> None:
    assert analysis.words("I don\u2019t know, it's 42 times_two!") == [
        "I",
        "don\u2019t",
        "know",
        "it's",
        "42",
        "times",
        "two",
    ]


def test_sentences_split_at_end_marks_quotes_and_blank_lines() -> None:
    assert analysis.sentences(SAMPLE) == [S1, S2, S3, S4]
    assert analysis.sentences('He said "hi." Then he left...\n\nA new paragraph') == [
        'He said "hi."',
        "Then he left...",
        "A new paragraph",
    ]
    assert analysis.sentences("no end mark") == ["no end mark"]
    assert analysis.sentences(" ... !? ") == []


@pytest.mark.parametrize(
    ("word", "syllables"),
    [
        ("the", 1),
        ("garden", 2),
        ("beautiful", 3),
        ("gate", 1),
        ("table", 2),
        ("ugly", 2),
        ("Quiet", 1),  # the heuristic's known miss: one vowel group
        ("don't", 1),
        ("42", 1),
    ],
)
def test_syllables(word: str, syllables: int) -> None:
    assert analysis.count_syllables(word) == syllables


def test_count_text_by_hand() -> None:
    assert analysis.count_text(SAMPLE) == COUNTS
    assert analysis.count_text("One word").model_dump() == {
        "words": 2,
        "sentences": 1,
        "characters": 7,
        "unique_words": 2,
        "average_sentence_length": 2.0,
    }


def test_readability_by_hand() -> None:
    assert analysis.readability(SAMPLE) == READABILITY
    # "The cat sat." 3 words, 3 syllables, 1 sentence: 206.835 - 3.045 - 84.6 = 119.19.
    assert analysis.readability("The cat sat.").flesch_reading_ease == 119.2
    with pytest.raises(ValueError, match="at least one word"):
        analysis.readability("?!")


@pytest.mark.parametrize(
    ("ease", "level"),
    [
        (119.2, "very easy"),
        (90, "very easy"),
        (89.9, "easy"),
        (70, "fairly easy"),
        (65, "standard"),
        (50, "fairly difficult"),
        (30, "difficult"),
        (29.9, "very difficult"),
        (-12, "very difficult"),
    ],
)
def test_reading_levels(ease: float, level: str) -> None:
    assert analysis.reading_level(ease) == level


def test_sentiment_by_hand() -> None:
    assert analysis.score_sentiment(SAMPLE) == SENTIMENT


def verdict(score: float, positive: list[str], negative: list[str]) -> SentimentScore:
    label = "positive" if score > 0.05 else "negative" if score < -0.05 else "neutral"
    return SentimentScore(label=label, score=score, positive=positive, negative=negative)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # "not" two words back still flips: -(+2) over one match = -0.667.
        ("Not a good idea.", verdict(-0.667, [], ["not a good"])),
        # Any "...n't" negates, with a curly apostrophe too: +2.
        ("This isn\u2019t bad at all.", verdict(0.667, ["isn't bad"], [])),
        # Negation stops at the end of a sentence.
        ("It is not. Good day!", verdict(0.667, ["good"], [])),
        # +3 - 3 = 0 over two matches: neutral.
        ("Wonderful food, terrible service.", verdict(0.0, ["wonderful"], ["terrible"])),
        ("The cat sat on the mat.", verdict(0.0, [], [])),
    ],
)
def test_sentiment_rules(text: str, expected: SentimentScore) -> None:
    assert analysis.score_sentiment(text) == expected


def test_keywords_by_hand() -> None:
    assert analysis.extract_keywords(SAMPLE) == KEYWORDS.keywords
    assert analysis.extract_keywords(SAMPLE, 2) == [
        KeywordCount(word="garden", count=2),
        KeywordCount(word="roses", count=2),
    ]
    # Case and curly apostrophes fold together; numbers and stop words never count.
    assert analysis.extract_keywords("Tea\u2019s fine. TEA'S great, 2024 of 2024.") == [
        KeywordCount(word="tea's", count=2),
        KeywordCount(word="fine", count=1),
        KeywordCount(word="great", count=1),
    ]
    assert analysis.extract_keywords("It is what it is.") == []


def test_key_sentences_by_hand() -> None:
    found = [keyword.word for keyword in KEYWORDS.keywords]
    assert analysis.key_sentences(SAMPLE, found) == KEY_SENTENCES.sentences
    # S2 and S4 both hold 2 keywords: the earlier wins; the result keeps the text's order.
    assert analysis.key_sentences(SAMPLE, found, limit=2) == [S1, S2]
    assert analysis.key_sentences(SAMPLE, ["GATE"], limit=1) == [S3]
    assert analysis.key_sentences(SAMPLE, [], limit=1) == [S1]


def test_only_readability_is_sync() -> None:
    assert not tools.readability.is_async
    assert all(
        tool.is_async
        for tool in (
            tools.count_text,
            tools.score_sentiment,
            tools.extract_keywords,
            tools.key_sentences,
        )
    )


async def call(tool: Tool, arguments: dict[str, Any]) -> Any:
    """Run a tool the way the runtime does: validated input, a context, sync or async."""
    ctx: ToolContext[dict[str, Any]] = ToolContext("s", "agent", "call-0-0", 1, {})
    assert tool.execute is not None
    result = tool.execute(tool.input_schema.model_validate(arguments), ctx)
    if inspect.isawaitable(result):
        result = await result
    assert isinstance(result, BaseModel)
    return result.model_dump(mode="json")


async def test_tools_give_the_hand_computed_results() -> None:
    text = {"text": SAMPLE}
    assert await call(tools.count_text, text) == COUNTS.model_dump()
    assert await call(tools.readability, text) == READABILITY.model_dump()
    assert await call(tools.score_sentiment, text) == SENTIMENT.model_dump()
    assert await call(tools.extract_keywords, {**text, "top_n": 5}) == KEYWORDS.model_dump()
    found = [keyword.word for keyword in KEYWORDS.keywords]
    assert (
        await call(tools.key_sentences, {**text, "keywords": found, "limit": 1})
        == KEY_SENTENCES.model_dump()
    )
    # S4 holds both garden and roses, S1 only garden.
    assert await call(tools.key_sentences, {**text, "keywords": ["garden", "roses"]}) == {
        "sentences": [S4]
    }


@pytest.mark.parametrize(
    ("schema", "arguments", "problem"),
    [
        (TextInput, {}, "text\n  Field required"),
        (TextInput, {"text": 42}, "Input should be a valid string"),
        (TextInput, {"text": " ... "}, "the text must contain at least one word"),
        (TextInput, {"text": "a" * (MAX_TEXT_CHARS + 1)}, "at most 20000 characters"),
        (KeywordsInput, {"text": "words here", "top_n": 0}, "greater than or equal to 1"),
        (KeySentencesInput, {"text": "words here"}, "keywords\n  Field required"),
        (KeySentencesInput, {"text": "a b", "keywords": [], "limit": 9}, "less than or equal to 5"),
    ],
)
def test_tool_inputs_are_validated(
    schema: type[BaseModel], arguments: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ValidationError, match=problem):
        schema.model_validate(arguments)
