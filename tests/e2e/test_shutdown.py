"""A server that shuts down (SIGTERM) ends its open streams cleanly: the response completes
(no "ASGI callable returned without completing response"), the client reconnects with
`Last-Event-ID` to the server that takes the run over, and gets exactly the rest."""

from __future__ import annotations

import asyncio
import signal

import pytest

from tests.e2e.agents import EXPECTED_OUTPUT
from tests.e2e.conftest import Cluster, loopback_client, read_stream, wait_status
from tests.e2e.streams import check_sequences

pytestmark = pytest.mark.slow


async def test_shutdown_ends_open_streams_cleanly(pg_cluster: Cluster) -> None:
    first = await pg_cluster.start("a", SERVER_ID="a")
    async with loopback_client(first.url) as client:
        started = await client.post(
            "/start", json={"agentType": "lead", "message": "go", "sessionId": "g1"}
        )
    assert started.status_code == 201, started.text

    async def stop_after_first_chunks(read: object) -> None:
        if len(getattr(read, "chunks", [])) == 3:
            first.process.send_signal(signal.SIGTERM)

    head = await read_stream(first.url, "g1", on_chunk=stop_after_first_chunks)
    await asyncio.wait_for(first.process.wait(), 10)
    log = first.log()
    # The stream ended as a complete response, without its end: the run is not over.
    assert head.broken is None, log
    assert head.end is None, log
    assert "ASGI callable returned without completing response" not in log
    assert "Traceback" not in log
    # uvicorn re-raises the signal it stopped on, once it has shut down.
    assert first.process.returncode in (0, -signal.SIGTERM), log

    # The server that comes back under the same name resumes the run; the client goes on
    # from the last id it saw and gets exactly the rest.
    again = await pg_cluster.start("a-again", SERVER_ID="a")
    rest = await read_stream(again.url, "g1", last_event_id=head.last_id)
    done = await wait_status(again.url, "g1", "completed")
    whole = await read_stream(again.url, "g1")
    assert rest.end == {"status": "completed"}, pg_cluster.logs()
    check_sequences(rest.chunks, rest.ids, first=len(head.chunks) + 1)
    assert head.chunks + rest.chunks == whole.chunks
    assert done["output"] == EXPECTED_OUTPUT
