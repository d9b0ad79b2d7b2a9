"""The demo's tools: the analysis functions offered to agents, with validated pydantic input."""

from __future__ import annotations

from typing import Any

from app.agents import Tool, ToolContext, define_tool
from app.demo import analysis, catalogue
from app.demo.names import (
    BOOK,
    COUNT_TEXT,
    EXTRACT_KEYWORDS,
    FIND_HOTELS,
    KEY_SENTENCES,
    LOOKUP_TOPIC,
    READABILITY,
    SCORE_SENTIMENT,
)
from app.demo.schemas import (
    BookingRequest,
    Confirmation,
    Hotels,
    KeySentences,
    KeySentencesInput,
    Keywords,
    KeywordsInput,
    Lookup,
    LookupInput,
    Readability,
    SentimentScore,
    TextCounts,
    TextInput,
    TripRequest,
)


async def _count_text(input: TextInput, ctx: ToolContext[Any]) -> TextCounts:
    return analysis.count_text(input.text)


# Sync on purpose: the demo shows a tool the runtime runs in a worker thread, off the event loop.
def _readability(input: TextInput, ctx: ToolContext[Any]) -> Readability:
    return analysis.readability(input.text)


async def _score_sentiment(input: TextInput, ctx: ToolContext[Any]) -> SentimentScore:
    return analysis.score_sentiment(input.text)


async def _extract_keywords(input: KeywordsInput, ctx: ToolContext[Any]) -> Keywords:
    return Keywords(keywords=analysis.extract_keywords(input.text, input.top_n))


async def _key_sentences(input: KeySentencesInput, ctx: ToolContext[Any]) -> KeySentences:
    return KeySentences(sentences=analysis.key_sentences(input.text, input.keywords, input.limit))


count_text: Tool = define_tool(
    COUNT_TEXT,
    description="Count a text's words, sentences, non-whitespace characters and distinct words, "
    "and its average sentence length.",
    input_schema=TextInput,
    execute=_count_text,
)
"""Tool: `analysis.count_text`."""

readability: Tool = define_tool(
    READABILITY,
    description="Score how easy a text is to read: syllables, Flesch reading ease (0-100, higher "
    "is easier), Flesch-Kincaid grade and the reading-ease band.",
    input_schema=TextInput,
    execute=_readability,
)
"""Tool: `analysis.readability` (sync: it runs in a worker thread)."""

score_sentiment: Tool = define_tool(
    SCORE_SENTIMENT,
    description="Score a text's sentiment with a built-in word lexicon (negation aware): the "
    "label, a score from -1 to 1, and the positive and negative terms it found.",
    input_schema=TextInput,
    execute=_score_sentiment,
)
"""Tool: `analysis.score_sentiment`."""

extract_keywords: Tool = define_tool(
    EXTRACT_KEYWORDS,
    description="List a text's most frequent content words (stop words left out) with their "
    "counts, most frequent first.",
    input_schema=KeywordsInput,
    execute=_extract_keywords,
)
"""Tool: `analysis.extract_keywords`."""

key_sentences: Tool = define_tool(
    KEY_SENTENCES,
    description="Pick the sentences of a text that contain the most occurrences of the given "
    "keywords, returned verbatim in the text's order: an extractive summary.",
    input_schema=KeySentencesInput,
    execute=_key_sentences,
)
"""Tool: `analysis.key_sentences`."""


async def _find_hotels(input: TripRequest, ctx: ToolContext[Any]) -> Hotels:
    found = catalogue.find_hotels(input.city)
    if found is None:
        cities = ", ".join(catalogue.HOTELS)
        raise ValueError(f"No hotels in {input.city!r}: the catalogue has {cities}")
    return found


async def _book(input: BookingRequest, ctx: ToolContext[Any]) -> Confirmation:
    return catalogue.book(input.hotel, input.city, input.nights)


async def _lookup_topic(input: LookupInput, ctx: ToolContext[Any]) -> Lookup:
    return catalogue.lookup(input.topic, input.offset, input.limit)


find_hotels: Tool = define_tool(
    FIND_HOTELS,
    description="List a city's hotels with their price per night (euros) and rating (out of "
    "5), best rated first. `nights` is the stay you plan.",
    input_schema=TripRequest,
    execute=_find_hotels,
)
"""Tool: `catalogue.find_hotels`."""

book: Tool = define_tool(
    BOOK,
    description="Book a hotel for a number of nights; a person approves every booking first. "
    "Returns the booking's reference and total.",
    input_schema=BookingRequest,
    execute=_book,
    requires_approval=True,
)
"""Tool: `catalogue.book`, run only once approved."""

lookup_topic: Tool = define_tool(
    LOOKUP_TOPIC,
    description="Look a topic up in the built-in library: the facts from `offset` on (skip "
    "those you already reported), at most `limit`, and how many remain.",
    input_schema=LookupInput,
    execute=_lookup_topic,
)
"""Tool: `catalogue.lookup`."""
