"""The demo tree run in-process: the coordinator's stream, its children's typed outputs, the
nested topics agent, the answers without a text, and the brains' failures."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from app import AgentRuntime
from app.demo import COORDINATOR, build_registry
from app.demo.brains import HELP, PLAN, TOO_LONG, text_to_analyse, write_report
from app.demo.schemas import (
    MAX_TEXT_CHARS,
    Keywords,
    Readability,
    SentimentScore,
    TextStats,
    Topics,
)
from app.protocol import Chunk, ToolMessage
from app.runtime import RunResult
from tests.demo.sample import (
    KEY_SENTENCES,
    KEYWORDS,
    REPORT,
    SAMPLE,
    SENTIMENT,
    STATS,
    TOPICS,
)
from tests.support import check_invariants, snapshot


def js(value: Any) -> str:
    """JSON as `tests.support.snapshot` prints it."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


TEXT = js({"text": SAMPLE})
STATS_JS = js(STATS.model_dump())
SENTIMENT_JS = js(SENTIMENT.model_dump())
KEYWORDS_JS = js(KEYWORDS.model_dump())
TOPICS_JS = js(TOPICS.model_dump())
FOUND = [keyword.word for keyword in KEYWORDS.keywords]
COUNTS_JS = js(STATS.model_dump(exclude=set(Readability.model_fields)))
READABILITY_JS = js(STATS.model_dump(include=set(Readability.model_fields)))
KEY_SENTENCES_ARGS = js({"keywords": FOUND, "limit": 1, "text": SAMPLE})

STATS_PLAN = "I'll count the words and sentences and score the readability, both at once."
TOPICS_PLAN = "I'll have the keywords agent find the most frequent content words first."
TOPICS_NEXT = (
    "The top keywords are garden, roses, beautiful; now I'll pick the sentence that covers "
    "them best."
)
KEYWORDS_PLAN = "I'll count the content words, leaving out stop words."


async def run(message: str, agent: str = COORDINATOR) -> tuple[RunResult, list[Chunk]]:
    """Run `agent` to its end on the demo with no latency; its result and its whole stream."""
    async with AgentRuntime(build_registry(latency=0)) as runtime:
        handle = await runtime.execute(agent, message, session_id="root")
        result = await handle.result()
        chunks = [chunk async for chunk in runtime.follow("root")]
    check_invariants(chunks)
    return result, chunks


def by_session(chunks: list[Chunk]) -> dict[str, list[str]]:
    """Each session's chunks in order, as `type detail` lines."""
    sessions: dict[str, list[str]] = {}
    for line in snapshot(chunks):
        _, agent, rest = line.split(" ", 2)
        sessions.setdefault(agent, []).append(rest)
    return sessions


async def test_coordinator_delegates_in_parallel_and_reports() -> None:
    result, chunks = await run(f"Analyse this: {SAMPLE}")

    assert (result.status, result.output, result.error) == ("completed", REPORT, None)
    stats, sentiment, topics = (f"root-sub-call-0-{i}" for i in range(3))
    keywords = f"{topics}-sub-call-0-0"
    # One model response delegates to all three, before any child has run.
    assert snapshot(chunks)[:7] == [
        f"1 root text_delta {PLAN!r}",
        f"2 root tool_start subagent__text-stats#call-0-0 {TEXT}",
        f"3 root tool_start subagent__sentiment#call-0-1 {TEXT}",
        f"4 root tool_start subagent__topics#call-0-2 {TEXT}",
        f"5 root subagent_start text-stats {stats}",
        f"6 root subagent_start sentiment {sentiment}",
        f"7 root subagent_start topics {topics}",
    ]
    # Siblings interleave as they run (text-stats' sync tool finishes in a worker thread, at a
    # moment no test can fix), so each session's own stream is pinned, and the framing of the
    # whole by `check_invariants`.
    sessions = by_session(chunks)
    assert list(sessions) == ["root", stats, sentiment, topics, keywords]
    root = sessions["root"]
    assert len(root) == 15
    assert sorted(root[7:13]) == sorted(
        [
            f"subagent_end text-stats {stats} {STATS_JS}",
            f"tool_end subagent__text-stats#call-0-0 {STATS_JS}",
            f"subagent_end sentiment {sentiment} {SENTIMENT_JS}",
            f"tool_end subagent__sentiment#call-0-1 {SENTIMENT_JS}",
            f"subagent_end topics {topics} {TOPICS_JS}",
            f"tool_end subagent__topics#call-0-2 {TOPICS_JS}",
        ]
    )
    assert root[13:] == [f"text_delta {REPORT!r}", f"output {js(REPORT)}"]
    assert sessions[stats] == [
        f"text_delta {STATS_PLAN!r}",
        f"tool_start count_text#call-0-0 {TEXT}",
        f"tool_start readability#call-0-1 {TEXT}",
        f"tool_end count_text#call-0-0 {COUNTS_JS}",
        f"tool_end readability#call-0-1 {READABILITY_JS}",
        "text_delta '26 words with a reading ease of 86.4: easy.'",
        f"output {STATS_JS}",
    ]
    assert sessions[sentiment] == [
        'text_delta "I\'ll score the tone with the sentiment lexicon."',
        f"tool_start score_sentiment#call-0-0 {TEXT}",
        f"tool_end score_sentiment#call-0-0 {SENTIMENT_JS}",
        "text_delta 'The tone is positive (score 0.267).'",
        f"output {SENTIMENT_JS}",
    ]
    assert sessions[topics] == [
        f"text_delta {TOPICS_PLAN!r}",
        f"tool_start subagent__keywords#call-0-0 {TEXT}",
        f"subagent_start keywords {keywords}",
        f"subagent_end keywords {keywords} {KEYWORDS_JS}",
        f"tool_end subagent__keywords#call-0-0 {KEYWORDS_JS}",
        f"text_delta {TOPICS_NEXT!r}",
        f"tool_start key_sentences#call-1-0 {KEY_SENTENCES_ARGS}",
        f"tool_end key_sentences#call-1-0 {js(KEY_SENTENCES.model_dump())}",
        "text_delta 'Done: the topics and a one-sentence summary.'",
        f"output {TOPICS_JS}",
    ]
    assert sessions[keywords] == [
        f"text_delta {KEYWORDS_PLAN!r}",
        f"tool_start extract_keywords#call-0-0 {js({'text': SAMPLE, 'top_n': 5})}",
        f"tool_end extract_keywords#call-0-0 {KEYWORDS_JS}",
        "text_delta 'Found 5 keywords.'",
        f"output {KEYWORDS_JS}",
    ]


async def test_children_outputs_are_typed_and_stored() -> None:
    async with AgentRuntime(build_registry(latency=0)) as runtime:
        handle = await runtime.execute(COORDINATOR, SAMPLE, session_id="root")
        assert (await handle.result()).status == "completed"
        status = await runtime.status("root")
        messages = await runtime.store.load_messages("root")
        topics = await runtime.status("root-sub-call-0-2")
        keywords = await runtime.status("root-sub-call-0-2-sub-call-0-0")

    results = {m.tool_name: m.result for m in messages if isinstance(m, ToolMessage)}
    assert TextStats.model_validate(results["subagent__text-stats"]) == STATS
    assert SentimentScore.model_validate(results["subagent__sentiment"]) == SENTIMENT
    assert Topics.model_validate(results["subagent__topics"]) == TOPICS
    assert [(ref.agent_type, ref.status) for ref in status.sub_sessions] == [
        ("text-stats", "completed"),
        ("sentiment", "completed"),
        ("topics", "completed"),
    ]
    assert [(ref.agent_type, ref.status) for ref in topics.sub_sessions] == [
        ("keywords", "completed")
    ]
    assert Keywords.model_validate(keywords.output) == KEYWORDS


async def test_topics_nests_keywords_whole_stream() -> None:
    # Started on its own, the nested branch has no sibling to race: the whole stream is fixed.
    result, chunks = await run(SAMPLE, "topics")

    assert result.output == TOPICS.model_dump()
    child = "root-sub-call-0-0"
    assert snapshot(chunks) == [
        f"1 root text_delta {TOPICS_PLAN!r}",
        f"2 root tool_start subagent__keywords#call-0-0 {TEXT}",
        f"3 root subagent_start keywords {child}",
        f"4 {child} text_delta {KEYWORDS_PLAN!r}",
        f"5 {child} tool_start extract_keywords#call-0-0 {js({'text': SAMPLE, 'top_n': 5})}",
        f"6 {child} tool_end extract_keywords#call-0-0 {KEYWORDS_JS}",
        f"7 {child} text_delta 'Found 5 keywords.'",
        f"8 {child} output {KEYWORDS_JS}",
        f"9 root subagent_end keywords {child} {KEYWORDS_JS}",
        f"10 root tool_end subagent__keywords#call-0-0 {KEYWORDS_JS}",
        f"11 root text_delta {TOPICS_NEXT!r}",
        f"12 root tool_start key_sentences#call-1-0 {KEY_SENTENCES_ARGS}",
        f"13 root tool_end key_sentences#call-1-0 {js(KEY_SENTENCES.model_dump())}",
        "14 root text_delta 'Done: the topics and a one-sentence summary.'",
        f"15 root output {TOPICS_JS}",
    ]


@pytest.mark.parametrize("message", ["", "hi", "Help", "What can you do?", "Analyse this"])
async def test_without_a_text_the_coordinator_says_what_to_send(message: str) -> None:
    result, chunks = await run(message)

    assert (result.status, result.output) == ("completed", HELP)
    assert snapshot(chunks) == [f"1 root text_delta {HELP!r}", f"2 root output {js(HELP)}"]


async def test_a_text_too_long_is_declined() -> None:
    result, chunks = await run("word " * (MAX_TEXT_CHARS // 5 + 1))

    assert (result.status, result.output) == ("completed", TOO_LONG)
    assert len(chunks) == 2


async def test_a_new_turn_with_a_text_is_analysed() -> None:
    async with AgentRuntime(build_registry(latency=0)) as runtime:
        first = await runtime.execute(COORDINATOR, "hello", session_id="root")
        assert (await first.result()).output == HELP
        second = await runtime.resume("root", f"Please analyse the following: {SAMPLE}")
        result = await second.result()

    assert (result.status, result.output) == ("completed", REPORT)


async def test_a_specialist_without_words_fails_with_the_tool_error() -> None:
    result, chunks = await run("?!", "sentiment")

    assert result.status == "failed"
    assert result.error == (
        "score_sentiment failed: Invalid arguments for tool 'score_sentiment': "
        "text: Value error, the text must contain at least one word"
    )
    assert snapshot(chunks)[-1] == f"4 root error {result.error!r}"


def test_the_report_says_which_specialist_failed() -> None:
    def message(tool: str, result: Any = None, error: str | None = None) -> ToolMessage:
        return ToolMessage(tool_call_id=tool, tool_name=tool, result=result, error=error)

    results = {
        "subagent__text-stats": message("subagent__text-stats", error="Max steps exceeded"),
        "subagent__sentiment": message("subagent__sentiment", {"label": "odd"}),
        "subagent__topics": message("subagent__topics", TOPICS.model_dump()),
    }
    assert write_report(results) == (
        "Here is what my specialists found.\n"
        "Length and readability: unavailable (Max steps exceeded).\n"
        "Sentiment: unavailable (its output did not match its schema).\n"
        "Topics: garden, roses, beautiful.\n"
        "Summary: The garden is beautiful in spring."
    )
    assert write_report({}).splitlines()[1] == "Length and readability: unavailable (no answer)."


LONG_HELLO = "Hello there, my old friend, I have come to talk with you again"


@pytest.mark.parametrize(
    ("message", "text"),
    [
        ("Analyse this: It was fine.", "It was fine."),
        ("please ANALYZE the text below:\n  It was fine.", "It was fine."),
        ("It was fine, really.", "It was fine, really."),
        (LONG_HELLO, LONG_HELLO),
        ("Hello there", None),
        ("Analyse: two words", None),
        ("   ", None),
    ],
)
def test_text_to_analyse(message: str, text: str | None) -> None:
    assert text_to_analyse(message) == text


async def test_the_tree_streams_live_with_latency() -> None:
    latency = 0.1
    async with AgentRuntime(build_registry(latency=latency)) as runtime:
        started = time.perf_counter()
        handle = await runtime.execute(COORDINATOR, SAMPLE, session_id="root")
        arrivals = [(time.perf_counter() - started, chunk) async for chunk in handle.stream()]
        elapsed = time.perf_counter() - started

    chunks = [chunk for _, chunk in arrivals]
    check_invariants(chunks)
    assert chunks[-1].type == "output"
    assert arrivals[0][0] < elapsed / 3, "the first chunk waited for the end"
    # The critical path is 7 responses (coordinator, topics' 3, keywords' 2, coordinator).
    assert elapsed >= 7 * latency
    # The children overlap: each has streamed before any of them has finished.
    children = [f"root-sub-call-0-{i}" for i in range(3)]
    first = [next(i for i, c in enumerate(chunks) if c.agent_id == child) for child in children]
    done = [
        next(i for i, c in enumerate(chunks) if c.agent_id == child and c.type == "output")
        for child in children
    ]
    assert max(first) < min(done)


async def test_topics_without_content_words_falls_back_to_the_opening_sentence() -> None:
    result, chunks = await run("It is what it is. So it was.", "topics")

    assert result.output == Topics(topics=[], summary="It is what it is.").model_dump()
    assert by_session(chunks)["root"][5] == (
        'text_delta "There are no content words to go on, so I\'ll take the opening sentence."'
    )
