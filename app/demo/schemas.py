"""The typed contracts of the demo: tool inputs and results, sub-agent inputs and agent outputs.

They are what GET /agents serves and what a real model is offered, so every field says what it
holds.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_TEXT_CHARS = 20_000
"""The longest text the demo analyses, so one request cannot hold a worker for long."""

_HAS_WORD = re.compile(r"[0-9A-Za-z\u00C0-\uFFFF]")
"""A letter or digit: ASCII, or any character from U+00C0 on. Cruder than a word character, but
every regex dialect reads it alike (Python's, JSON Schema's ECMA-262, Rust's), so the published
schema and this check accept the same texts: to ECMA-262, `\\w` is ASCII only."""

ReadingLevel = Literal[
    "very easy",
    "easy",
    "fairly easy",
    "standard",
    "fairly difficult",
    "difficult",
    "very difficult",
]
"""Flesch's bands for the reading-ease score, from 90+ down to under 30."""

SentimentLabel = Literal["positive", "negative", "neutral"]
"""The overall tone: positive above a score of 0.05, negative below -0.05."""


class TextInput(BaseModel):
    """A text to analyse: the input of the text tools and of every specialist agent."""

    text: str = Field(
        max_length=MAX_TEXT_CHARS,
        description="The text to analyse, verbatim (at least one word).",
        # What `_has_a_word` checks, so the published schema (GET /agents, the OpenAPI document)
        # says it; JSON Schema patterns match anywhere in the string, as `search` does.
        json_schema_extra={"pattern": _HAS_WORD.pattern},
    )

    @field_validator("text")
    @classmethod
    def _has_a_word(cls, text: str) -> str:
        if not _HAS_WORD.search(text):
            raise ValueError("the text must contain at least one word")
        return text


class KeywordsInput(TextInput):
    """A text and how many keywords to return."""

    top_n: int = Field(default=5, ge=1, le=20, description="How many keywords to return.")


class KeySentencesInput(TextInput):
    """A text, the keywords to look for, and how many sentences to pick."""

    keywords: list[str] = Field(
        max_length=20, description="The keywords whose sentences matter most."
    )
    limit: int = Field(default=1, ge=1, le=5, description="How many sentences to return.")


class TextCounts(BaseModel):
    """What `count_text` measures."""

    words: int = Field(description="Words (runs of letters or digits, apostrophes kept).")
    sentences: int = Field(description="Sentences (ended by . ! ? or a blank line).")
    characters: int = Field(description="Characters that are not whitespace.")
    unique_words: int = Field(description="Distinct words, ignoring case.")
    average_sentence_length: float = Field(description="Words per sentence, to 2 decimals.")


class Readability(BaseModel):
    """What `readability` measures."""

    syllables: int = Field(description="Syllables, by a vowel-group heuristic.")
    flesch_reading_ease: float = Field(
        description="206.835 - 1.015 * words/sentence - 84.6 * syllables/word, to 1 decimal; "
        "higher is easier."
    )
    flesch_kincaid_grade: float = Field(
        description="0.39 * words/sentence + 11.8 * syllables/word - 15.59, to 1 decimal: "
        "a US school grade."
    )
    reading_level: ReadingLevel = Field(description="The reading-ease band.")


class SentimentScore(BaseModel):
    """The sentiment lexicon's verdict on a text: `score_sentiment`'s result and the output of
    the `sentiment` agent."""

    label: SentimentLabel = Field(description="The overall tone.")
    score: float = Field(
        ge=-1, le=1, description="Sum of the matched weights over 3 per match, to 3 decimals."
    )
    positive: list[str] = Field(description="The terms that counted as positive, in order.")
    negative: list[str] = Field(description="The terms that counted as negative, in order.")


class KeywordCount(BaseModel):
    """One keyword and how often it occurs."""

    word: str = Field(description="The keyword, lower case.")
    count: int = Field(ge=1, description="How many times it occurs.")


class Keywords(BaseModel):
    """The most frequent content words: `extract_keywords`' result and the `keywords` agent's
    output."""

    keywords: list[KeywordCount] = Field(
        description="Most frequent first; ties in order of first appearance."
    )


class KeySentences(BaseModel):
    """What `key_sentences` picks."""

    sentences: list[str] = Field(description="The chosen sentences, in the text's order.")


class TextStats(BaseModel):
    """The `text-stats` agent's output: counts and readability together."""

    words: int = Field(description="Words.")
    sentences: int = Field(description="Sentences.")
    characters: int = Field(description="Characters that are not whitespace.")
    unique_words: int = Field(description="Distinct words, ignoring case.")
    average_sentence_length: float = Field(description="Words per sentence.")
    syllables: int = Field(description="Syllables.")
    flesch_reading_ease: float = Field(description="Flesch reading ease; higher is easier.")
    flesch_kincaid_grade: float = Field(description="Flesch-Kincaid grade level.")
    reading_level: ReadingLevel = Field(description="The reading-ease band.")


class Topics(BaseModel):
    """The `topics` agent's output."""

    topics: list[str] = Field(description="The main topics (the top keywords), at most 3.")
    summary: str = Field(description="The sentence(s) that best cover the topics, verbatim.")


# -- trips -----------------------------------------------------------------------------------------

MAX_NIGHTS = 14
"""The longest stay the trips demo books."""


class TripRequest(BaseModel):
    """A stay to plan: the `itinerary` agent's input."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"city": "Lisbon", "nights": 2}]})

    city: str = Field(min_length=1, max_length=60, description="The city, e.g. Lisbon.")
    nights: int = Field(ge=1, le=MAX_NIGHTS, description="How many nights.")


class Hotel(BaseModel):
    """One hotel of the catalogue."""

    name: str = Field(description="The hotel's name.")
    price_per_night: int = Field(description="Euros per night.")
    rating: float = Field(description="Guests' rating, out of 5.")


class Hotels(BaseModel):
    """`find_hotels`' result."""

    city: str = Field(description="The city as the catalogue spells it.")
    hotels: list[Hotel] = Field(description="The city's hotels, best rated first.")


class BookingRequest(BaseModel):
    """A hotel to book: the input of `book` and of the `booker` agent."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"hotel": "Hotel Alfama Azul", "city": "Lisbon", "nights": 2}]
        }
    )

    hotel: str = Field(min_length=1, max_length=100, description="The hotel's name, verbatim.")
    city: str = Field(min_length=1, max_length=60, description="The hotel's city.")
    nights: int = Field(ge=1, le=MAX_NIGHTS, description="How many nights.")


class Confirmation(BaseModel):
    """`book`'s result."""

    confirmation: str = Field(description="The booking's reference.")
    hotel: str = Field(description="The hotel booked.")
    nights: int = Field(description="Nights booked.")
    total: int = Field(description="Euros in all.")


class Booking(BaseModel):
    """The `booker` agent's output: booked, or why not."""

    booked: bool = Field(description="Whether the hotel is booked.")
    hotel: str = Field(description="The hotel.")
    confirmation: str | None = Field(default=None, description="The reference, once booked.")
    total: int | None = Field(default=None, description="Euros in all, once booked.")
    note: str = Field(default="", description="Why it was not booked, if it was not.")


class TripPlan(BaseModel):
    """The `itinerary` agent's output: the hotel it chose and how its booking went."""

    city: str = Field(description="The city.")
    nights: int = Field(description="How many nights.")
    hotel: Hotel = Field(description="The hotel chosen.")
    booking: Booking = Field(description="The booking, or why there is none.")


# -- research --------------------------------------------------------------------------------------


class LookupInput(BaseModel):
    """A topic to look up, and which of its facts to return."""

    topic: str = Field(min_length=1, max_length=200, description="What to look up.")
    offset: int = Field(
        default=0, ge=0, le=100, description="How many of the topic's facts to skip."
    )
    limit: int = Field(default=2, ge=1, le=10, description="How many facts to return.")


class Lookup(BaseModel):
    """`lookup_topic`'s result."""

    topic: str | None = Field(description="The library's topic that matched, or null.")
    facts: list[str] = Field(description="The facts, in the library's order.")
    remaining: int = Field(description="How many more facts the topic holds after these.")


class Findings(BaseModel):
    """A `researcher`'s output: what it found on its topic this time."""

    topic: str = Field(description="The topic as it was asked.")
    found: str | None = Field(description="The library's topic that matched, or null.")
    facts: list[str] = Field(description="The facts found this time, verbatim.")
    remaining: int = Field(description="How many more facts a follow-up would find.")
