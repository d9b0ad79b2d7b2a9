"""The trips tree over HTTP: `book`, two levels below the root, pauses the whole tree until
`/resume` on the root answers its approval; and the planner's answers without a trip."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.demo.catalogue import book, find_hotels
from app.demo.schemas import TripRequest
from app.demo.trip_brains import TRIP_HELP, trip_request
from app.protocol import Chunk, ToolPendingChunk
from app.runtime.inputs import REJECTED
from tests.demo.http import demo_client, follow, resume, start, status
from tests.support import check_invariants, check_tool_calls

BOOKER = "trip-1-sub-call-0-0-sub-call-1-0"
"""root -> itinerary (its first call) -> booker (the itinerary's second step's call)."""

PENDING = {
    "sessionId": BOOKER,
    "toolCallId": "call-0-0",
    "toolName": "book",
    "arguments": {"hotel": "Casa do Miradouro", "city": "Lisbon", "nights": 3},
    "reason": "approval",
}

HEADLINE = "Your trip: 3 nights in Lisbon at Casa do Miradouro (rated 4.8, 140 euros a night)."


@pytest.mark.parametrize("approved", [True, False])
async def test_the_approval_two_levels_down_pauses_the_tree_and_resumes_it(
    tmp_path: Path, approved: bool
) -> None:
    chunks: list[Chunk] = []
    async with demo_client(tmp_path) as client:
        await start(client, "trip-planner", "trip-1", "Plan a trip: 3 nights in Lisbon")
        assert await follow(client, "trip-1", chunks) == "paused_awaiting_client"
        paused = await status(client, "trip-1")
        (pending,) = [c for c in chunks if isinstance(c, ToolPendingChunk)]
        check_tool_calls(chunks, "paused_awaiting_client")

        answer = {"sessionId": BOOKER, "toolCallId": "call-0-0", "approved": approved}
        await resume(client, "trip-1", {"approvals": [answer]})
        assert await follow(client, "trip-1", chunks) == "completed"
        done = await status(client, "trip-1")
        booker = await status(client, BOOKER)

    assert paused["status"] == "paused_awaiting_client"
    assert paused["pendingCalls"] == [PENDING]
    assert (pending.agent_id, pending.tool_name, pending.reason) == (BOOKER, "book", "approval")
    assert done["status"] == "completed"
    assert done["pendingCalls"] == []
    if approved:
        booked = book("Casa do Miradouro", "Lisbon", 3)
        assert booked.total == 420
        assert done["output"] == (
            f"{HEADLINE}\nBooked: reference {booked.confirmation}, 420 euros in all."
        )
        assert booker["output"] == {
            "booked": True,
            "hotel": "Casa do Miradouro",
            "confirmation": booked.confirmation,
            "total": 420,
            "note": "",
        }
    else:
        assert done["output"] == f"{HEADLINE}\nNot booked: {REJECTED}"
        assert booker["output"]["booked"] is False
    check_invariants(chunks)
    check_tool_calls(chunks, "completed")


@pytest.mark.parametrize(
    ("message", "asked"),
    [
        ("Plan a trip: 3 nights in Lisbon", TripRequest(city="Lisbon", nights=3)),
        ("a weekend in kyoto, please", TripRequest(city="Kyoto", nights=2)),
        ("1 night in Paris", TripRequest(city="Paris", nights=1)),
        ("Plan a trip to Atlantis", TRIP_HELP),
        ("hello", TRIP_HELP),
        ("40 nights in Rome", "I book stays of 1 to 14 nights: how many would you like?"),
    ],
)
def test_the_planner_reads_the_city_and_nights(message: str, asked: TripRequest | str) -> None:
    assert trip_request(message) == asked


def test_the_catalogue() -> None:
    hotels = find_hotels("LISBON")
    assert hotels is not None
    assert hotels.city == "Lisbon"
    assert hotels.hotels[0].name == "Casa do Miradouro"
    assert find_hotels("Atlantis") is None
    # The same booking gets the same reference, so a call made again matches.
    assert book("Casa do Miradouro", "lisbon", 3) == book("Casa do Miradouro", "Lisbon", 3)
    with pytest.raises(ValueError, match="No hotel named 'Ritz'"):
        book("Ritz", "Lisbon", 1)
