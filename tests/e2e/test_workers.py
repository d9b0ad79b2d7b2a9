"""Two worker processes of one server (`python -m app.serve --workers 2`) on PostgreSQL: a
stream served by one worker follows a run of the other, an interrupt received by one stops a
run of the other, a run whose worker is killed is taken over, and `/metrics` adds up every
worker's figures (the dead one's included).

Which worker answers a connection is the kernel's choice; the test makes it by stopping the
other worker (SIGSTOP) while the connection is accepted, and letting it go on (SIGCONT) after.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.agents import EXPECTED_OUTPUT
from tests.e2e.conftest import Cluster, ServerProcess, loopback_client, wait_status

pytestmark = pytest.mark.slow


def workers_of(server: ServerProcess) -> list[int]:
    """The worker processes the server's parent process runs (not its resource tracker)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            ppid = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            command = (entry / "cmdline").read_bytes()
            if ppid == server.pid and b"resource_tracker" not in command:
                found.append(int(entry.name))
    return sorted(found)


@contextlib.contextmanager
def only(pid: int, workers: list[int]) -> Iterator[None]:
    """Only worker `pid` can accept connections while the block runs."""
    others = [other for other in workers if other != pid]
    for other in others:
        os.kill(other, signal.SIGSTOP)
    try:
        yield
    finally:
        for other in others:
            os.kill(other, signal.SIGCONT)


async def answers_alone(url: str, pid: int, workers: list[int]) -> None:
    with only(pid, workers):
        async with loopback_client(url, timeout=30) as client:
            assert (await client.get("/readyz")).status_code == 200


class Stream:
    """An SSE connection opened (accepted by some worker) and read later."""

    def __init__(self, url: str, stream_id: str, after: int = 0) -> None:
        self.client = loopback_client(url, timeout=30)
        self.stream_id = stream_id
        self.after = after
        self.stack = contextlib.AsyncExitStack()
        self.lines: AsyncIterator[str] | None = None

    async def open(self) -> None:
        request = self.client.stream(
            "GET", f"/stream/{self.stream_id}", headers={"Last-Event-ID": str(self.after)}
        )
        response = await self.stack.enter_async_context(request)
        assert response.status_code == 200
        self.lines = response.aiter_lines()

    async def read(self, *, stop_after: int | None = None) -> tuple[list[int], dict[str, str]]:
        """Sequences received, and the end event's data (empty if it stopped before)."""
        assert self.lines is not None
        sequences: list[int] = []
        event: dict[str, str] = {}
        async for line in self.lines:
            if not line:
                if event.get("event") == "end":
                    return sequences, json.loads(event["data"])
                if "id" in event and "data" in event:
                    sequences.append(int(event["id"]))
                    if stop_after is not None and len(sequences) == stop_after:
                        return sequences, {}
                event = {}
                continue
            name, _, value = line.partition(":")
            event[name] = value.strip()
        return sequences, {}

    async def close(self) -> None:
        await self.stack.aclose()
        await self.client.aclose()


def metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


async def test_two_workers_share_streams_interrupts_and_takeovers(pg_cluster: Cluster) -> None:
    server = await pg_cluster.start(
        "pair",
        workers=2,
        LEASE_SECONDS="2",
        TAKEOVER_INTERVAL="0.3",
        SHUTDOWN_TIMEOUT="2",
        LOG_FORMAT="json",
    )
    workers = workers_of(server)
    assert len(workers) == 2, workers
    a, b = workers
    for pid in workers:
        await answers_alone(server.url, pid, workers)

    # Worker a runs the session; worker b serves its stream.
    with only(a, workers):
        async with loopback_client(server.url) as client:
            started = await client.post(
                "/start", json={"agentType": "lead", "message": "go", "sessionId": "w1"}
            )
        assert started.status_code == 201, started.text
    watched = Stream(server.url, "w1")
    with only(b, workers):
        await watched.open()
    head, end = await watched.read(stop_after=3)
    assert (head, end) == ([1, 2, 3], {})

    # Worker b takes the interrupt; worker a's run stops; b's stream ends with it.
    with only(b, workers):
        async with loopback_client(server.url) as client:
            interrupted = await client.post("/interrupt/w1", json={"reason": "across"})
        assert interrupted.status_code == 202, interrupted.text
    rest, end = await watched.read()
    await watched.close()
    assert end == {"status": "interrupted"}, pg_cluster.logs()
    check_sequences_only(head + rest)
    stopped = await wait_status(server.url, "w1", "interrupted")

    # Worker b resumes it; a stream on worker a follows; b is killed mid-run; the run is taken
    # over (by a, or by the worker that replaced b) and the stream on a sees it finish.
    with only(b, workers):
        async with loopback_client(server.url) as client:
            resumed = await client.post("/resume/w1")
        assert resumed.status_code == 200, resumed.text
    follower = Stream(server.url, "w1", after=stopped["lastSequence"])
    with only(a, workers):
        await follower.open()
    before_kill, end = await follower.read(stop_after=2)
    assert end == {}
    os.kill(b, signal.SIGKILL)
    after_kill, end = await follower.read()
    await follower.close()
    done = await wait_status(server.url, "w1", "completed", timeout=60)
    assert end == {"status": "completed"}, pg_cluster.logs()
    assert done["output"] == EXPECTED_OUTPUT
    check_sequences_only(before_kill + after_kill, first=stopped["lastSequence"] + 1)

    # Every worker's figures, the killed one's too: started, resumed, taken over.
    async with loopback_client(server.url) as client:
        text = (await client.get("/metrics")).text
    assert metric(text, "agent_runs_started_total", agent_type="lead") == 3
    assert metric(text, "agent_takeovers_total") == 1
    assert metric(text, "agent_runs_ended_total", agent_type="lead", status="interrupted") == 1
    assert metric(text, "agent_runs_ended_total", agent_type="lead", status="completed") == 1
    assert metric(text, "agent_sse_clients") == 0

    # Every line the server wrote, its supervisor's and uvicorn's included, is JSON; those
    # about the run name it.
    await server.stop()
    lines = [json.loads(line) for line in server.log_path.read_text().splitlines() if line]
    assert {line["logger"] for line in lines} >= {"app.runs", "uvicorn.error"}
    ended = [line for line in lines if line["message"] == "Run ended"]
    assert {(line["session_id"], line["root_id"], line["agent_type"]) for line in ended} >= {
        ("w1", "w1", "lead")
    }


def check_sequences_only(sequences: list[int], first: int = 1) -> None:
    assert sequences == list(range(first, first + len(sequences)))
