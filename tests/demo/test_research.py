"""The research tree over HTTP: persistent researchers spawned in parallel, one continued with
its memory, a digest in the background whose end arrives as a notice, then a turn that lists
the children and one that terminates them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.demo.catalogue import LIBRARY, lookup
from app.demo.research_brains import RESEARCH_HELP, child_name, research_topics
from app.protocol import Chunk
from tests.demo.http import demo_client, follow, resume, start, status
from tests.support import check_invariants, check_tool_calls

SOLAR = LIBRARY["solar power"][1]
WIND = LIBRARY["wind power"][1]
FIRST_REPORT = (
    "Here is what my researchers found.\n"
    f"- solar-power (solar power): {' '.join(SOLAR)}\n"
    f"- wind-power (wind power): {' '.join(WIND[:2])}"
)
NOTICE = (
    "Persistent child 'topics-1' (topics, session research-1-agent-topics-1) completed. "
    "Its output: "
)


def refs(body: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {
        ref["name"]: (ref["subSessionId"], ref["mode"], ref["status"])
        for ref in body["subSessions"]
    }


async def test_the_lead_spawns_continues_lists_and_terminates_its_children(
    tmp_path: Path,
) -> None:
    chunks: list[Chunk] = []
    async with demo_client(tmp_path) as client:
        await start(client, "research-lead", "research-1", "Research: solar power and wind power")
        # The stream ends once the background digest has ended too.
        assert await follow(client, "research-1", chunks) == "completed"
        first = await status(client, "research-1")
        await resume(client, "research-1", {"message": "What are they doing?"})
        assert await follow(client, "research-1", chunks) == "completed"
        second = await status(client, "research-1")
        await resume(client, "research-1", {"message": "Thanks, we are done."})
        assert await follow(client, "research-1", chunks) == "completed"
        third = await status(client, "research-1")
        solar = await status(client, "research-1-agent-solar-power")
        lead = (await client.get("/sessions/research-1/messages")).json()["messages"]
        told = (await client.get("/sessions/research-1-agent-solar-power/messages")).json()

    assert first["output"].startswith(FIRST_REPORT + "\n")
    assert refs(first) == {
        "solar-power": ("research-1-agent-solar-power", "persistent", "completed"),
        "wind-power": ("research-1-agent-wind-power", "persistent", "completed"),
        "topics-1": ("research-1-agent-topics-1", "persistent", "completed"),
    }
    # The continued researcher kept its memory: its follow-up found the next two facts.
    asked = [m["message"]["content"] for m in told["messages"] if m["message"]["role"] == "user"]
    assert asked == [
        "solar power",
        "Anything more on solar power? Tell me what you have not told me yet.",
    ]
    # The digest's end reached the lead once, as a notice, in whichever turn came first.
    notices = [m["message"]["content"] for m in lead if m["message"]["role"] == "system"]
    (notice,) = notices
    assert notice.startswith(NOTICE)
    digest = (
        "Digest (topics-1): about turn, electricity, wind. In a sentence: "
        "Wind turbines turn the kinetic energy of moving air into electricity."
    )
    assert sum(digest in turn["output"] for turn in (first, second)) == 1

    # Children are listed in the order they were first added: the two spawned together
    # in either order.
    lines = second["output"].split("\n")
    assert lines[0] == "My children:"
    assert sorted(lines[1:4]) == [
        "- solar-power (researcher): completed",
        "- topics-1 (topics): completed",
        "- wind-power (researcher): completed",
    ]
    assert lines[4:] in ([], [digest])
    gone = third["output"].removeprefix("We are done: I terminated ").removesuffix(".")
    assert sorted(gone.split(", ")) == ["solar-power", "topics-1", "wind-power"]
    assert {name: ref[2] for name, ref in refs(third).items()} == dict.fromkeys(
        ("solar-power", "wind-power", "topics-1"), "terminated"
    )
    assert (solar["status"], solar["output"]) == ("terminated", None)
    check_invariants(chunks)
    check_tool_calls(chunks, "completed")


async def test_without_a_request_or_children_the_lead_says_what_to_ask(tmp_path: Path) -> None:
    chunks: list[Chunk] = []
    async with demo_client(tmp_path) as client:
        await start(client, "research-lead", "r", "hello")
        assert await follow(client, "r", chunks) == "completed"
        body = await status(client, "r")
    assert body["output"] == RESEARCH_HELP
    assert body["subSessions"] == []


@pytest.mark.parametrize(
    ("message", "topics"),
    [
        ("Research: solar power and wind power", ["solar power", "wind power"]),
        (
            "please look up hydropower, batteries; geothermal energy.",
            ["hydropower", "batteries", "geothermal energy"],
        ),
        ("Research: a, b, c, d", ["a", "b", "c"]),
        ("Research: Wind Power and wind power", ["Wind Power"]),
        ("What are they doing?", []),
        ("Research:", []),
    ],
)
def test_the_lead_reads_its_topics(message: str, topics: list[str]) -> None:
    assert research_topics(message) == topics


def test_child_names_and_the_library() -> None:
    assert child_name("Solar power!") == "solar-power"
    assert child_name("???") == "topic"
    assert lookup("solar panels").facts == SOLAR[:2]
    assert lookup("solar", offset=2, limit=5).facts == SOLAR[2:]
    assert lookup("wind turbines", offset=2).remaining == 0
    assert lookup("knitting").topic is None
