"""The demo's agent and tool names, shared by the agent definitions and their brains.

Kept apart so that `agents.py` (which wires the brains in) and `brains.py` (which names the tools
and sub-agents it calls) need not import each other.
"""

from __future__ import annotations

from app.agents.subagent import SUBAGENT_TOOL_PREFIX

COORDINATOR = "text-analyst"
"""The agent a person starts: it delegates to the specialists and writes the report."""
TEXT_STATS = "text-stats"
"""Specialist: counts and readability."""
SENTIMENT = "sentiment"
"""Specialist: lexicon-based tone."""
TOPICS = "topics"
"""Specialist: topics and a one-sentence summary, from the `keywords` agent's keywords."""
KEYWORDS = "keywords"
"""Third level: keyword extraction by frequency, for `topics`."""

SPECIALISTS = (TEXT_STATS, SENTIMENT, TOPICS)
"""The coordinator's children, in the order it calls them."""

COUNT_TEXT = "count_text"
"""Tool: words, sentences, characters."""
READABILITY = "readability"
"""Tool: syllables, Flesch reading ease and grade."""
SCORE_SENTIMENT = "score_sentiment"
"""Tool: the sentiment lexicon's score."""
EXTRACT_KEYWORDS = "extract_keywords"
"""Tool: the most frequent content words."""
KEY_SENTENCES = "key_sentences"
"""Tool: the sentences that carry the most keywords."""


TRIP_PLANNER = "trip-planner"
"""The trips tree's root: plans a stay through `itinerary` and reports the booking."""
ITINERARY = "itinerary"
"""Second level: picks a hotel with `find_hotels`, then has `booker` book it."""
BOOKER = "booker"
"""Third level: books with `book`, which runs only once a person approves it."""

FIND_HOTELS = "find_hotels"
"""Tool: a city's hotels, with their prices and ratings."""
BOOK = "book"
"""Tool: book a hotel; it requires approval."""

RESEARCH_LEAD = "research-lead"
"""The research tree's root: manages persistent researchers with the companion tools."""
RESEARCHER = "researcher"
"""Persistent, blocking: looks a topic up in the built-in library and remembers what it told."""

BRIEFING_DESK = "briefing-desk"
"""Background delegation (seed 004): one background `analyst` per topic, then wait and read."""
ANALYST = "analyst"
"""A `subagent` category: looks a topic up and answers in the summary envelope."""

LOOKUP_TOPIC = "lookup_topic"
"""Tool: the next facts the built-in library holds on a topic."""


def subagent_tool(agent_name: str) -> str:
    """The name of the tool that delegates to `agent_name`."""
    return SUBAGENT_TOOL_PREFIX + agent_name
