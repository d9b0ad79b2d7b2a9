"""A real server cut off from PostgreSQL by a network partition (its connections half-open):
it says it is not ready within seconds, SIGTERM still stops it within its grace period, and a
server that can reach the database finishes the run it left."""

from __future__ import annotations

import asyncio
import signal
from collections import Counter

import pytest
from sqlalchemy.engine import make_url

from tests.e2e.agents import EXPECTED_OUTPUT, expected_calls
from tests.e2e.conftest import Cluster, loopback_client, read_stream, wait_status
from tests.e2e.streams import check_sequences
from tests.proxy import proxy_to

pytestmark = pytest.mark.slow

CUT_OFF = {
    "DATABASE_TIMEOUT": "1",
    "DATABASE_CONNECT_TIMEOUT": "1",
    "SHUTDOWN_TIMEOUT": "2",
    "LEASE_SECONDS": "2",
    "TAKEOVER_INTERVAL": "0.25",
}


async def test_a_partitioned_server_stops_in_time_and_another_finishes_its_run(
    pg_cluster: Cluster,
) -> None:
    url = make_url(pg_cluster.database_url)
    async with proxy_to(url.host or "127.0.0.1", url.port or 5432) as proxy:
        behind = url.set(host="127.0.0.1", port=proxy.port).render_as_string(False)
        first = await pg_cluster.start("a", SERVER_ID="a", DATABASE_URL=behind, **CUT_OFF)
        async with loopback_client(first.url) as client:
            started = await client.post(
                "/start", json={"agentType": "lead", "message": "go", "sessionId": "p1"}
            )
            assert started.status_code == 201, started.text
            await read_stream(first.url, "p1", stop_after=12)
            proxy.blackhole()
            loop = asyncio.get_running_loop()
            asked = loop.time()
            ready = await client.get("/readyz", timeout=15)
            assert ready.status_code == 503, ready.text
            assert loop.time() - asked < 10, "readiness hung on the partition"
        first.process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(first.process.wait(), 20)
        second = await pg_cluster.start("b", SERVER_ID="b", **CUT_OFF)
        done = await wait_status(second.url, "p1", "completed", timeout=40)
        whole = await read_stream(second.url, "p1")
    assert done["output"] == EXPECTED_OUTPUT, pg_cluster.logs()
    check_sequences(whole.chunks, whole.ids)
    assert whole.end == {"status": "completed"}
    log = pg_cluster.calls()
    after = Counter((c["kind"], c["session"], c["key"]) for c in log if c["pid"] == second.pid)
    assert set(after) <= set(expected_calls("p1"))
    assert max(after.values()) == 1, after
