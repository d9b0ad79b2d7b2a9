"""A client that hangs up after K chunks and comes back with `Last-Event-ID: K` gets exactly
K+1..end, from the same server process or from another one sharing the PostgreSQL store, while
the run is still producing chunks."""

from __future__ import annotations

import pytest

from tests.e2e.agents import EXPECTED_OUTPUT, expected_calls
from tests.e2e.conftest import Cluster, loopback_client, read_stream, wait_status
from tests.e2e.streams import check_frames, check_sequences, expected_stories, stories
from tests.support import check_invariants

pytestmark = pytest.mark.slow

K = 4


@pytest.mark.parametrize("second_server", [False, True], ids=["same-server", "second-server"])
async def test_reconnect_with_last_event_id_gets_exactly_the_rest(
    pg_cluster: Cluster, second_server: bool
) -> None:
    first = await pg_cluster.start("a", SERVER_ID="a")
    other = await pg_cluster.start("b", SERVER_ID="b") if second_server else first
    async with loopback_client(first.url) as client:
        started = await client.post(
            "/start", json={"agentType": "lead", "message": "go", "sessionId": "r1"}
        )
    assert started.status_code == 201, started.text

    head = await read_stream(first.url, "r1", stop_after=K)
    assert head.end is None
    assert head.broken is None
    check_sequences(head.chunks, head.ids)
    async with loopback_client(other.url) as client:
        at_reconnect = (await client.get("/status/r1")).json()
    rest = await read_stream(other.url, "r1", last_event_id=head.last_id)
    done = await wait_status(other.url, "r1", "completed")
    whole = await read_stream(first.url, "r1")
    whole_elsewhere = await read_stream(other.url, "r1")

    assert at_reconnect["status"] == "running", "the run ended before the client came back"
    assert at_reconnect["lastSequence"] < done["lastSequence"], "nothing left to produce"
    assert rest.end == {"status": "completed"}
    assert rest.broken is None
    check_sequences(rest.chunks, rest.ids, first=K + 1)
    assert head.chunks + rest.chunks == whole.chunks == whole_elsewhere.chunks
    assert whole.ids == whole_elsewhere.ids
    check_sequences(whole.chunks, whole.ids)
    check_invariants(whole.chunks)
    check_frames(whole.chunks, complete=True)
    assert stories(whole.chunks, "r1") == expected_stories("r1")
    assert done["output"] == EXPECTED_OUTPUT
    assert done["lastSequence"] == len(whole.chunks)
    calls = [(c["kind"], c["session"], c["key"]) for c in pg_cluster.calls()]
    assert sorted(calls) == sorted(expected_calls("r1"))
    assert {c["pid"] for c in pg_cluster.calls()} == {first.pid}
