"""Background `subagent` sessions with real server processes (the `dispatcher` of
`tests.e2e.agents`): two servers on one PostgreSQL share the cap and the queue and run each
child once, and after a SIGKILL another server runs the queue on and tells the parent of each end
exactly once: a parent parked in `subagent_wait`, one whose turn had ended, and one killed in the
turn that reads the notices."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.store.sql import SqlStore
from tests.e2e.agents import launched
from tests.e2e.conftest import Cluster, loopback_client, read_stream, wait_status
from tests.support import check_invariants

pytestmark = pytest.mark.slow

FAST_TAKEOVER = {"LEASE_SECONDS": "2", "TAKEOVER_INTERVAL": "0.25"}


async def start(url: str, root: str, message: str) -> None:
    """Start a dispatcher `root` told `message` ("N [slow] [idle]", see tests.e2e.agents)."""
    async with loopback_client(url) as client:
        answer = await client.post(
            "/start", json={"agentType": "dispatcher", "message": message, "sessionId": root}
        )
    assert answer.status_code == 201, answer.text


async def status(url: str, session_id: str) -> dict[str, Any]:
    async with loopback_client(url) as client:
        answer = await client.get(f"/status/{session_id}")
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def logged(cluster: Cluster, kind: str, *sessions: str, timeout: float = 20.0) -> None:
    """Wait until each session has a `kind` call in the call log."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        made = {c["session"] for c in cluster.calls() if c["kind"] == kind}
        if set(sessions) <= made:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"no {kind} call of {sessions}\n{cluster.logs()}")


async def conversation(url: str, session_id: str) -> list[dict[str, Any]]:
    async with loopback_client(url) as client:
        answer = await client.get(f"/sessions/{session_id}/messages", params={"limit": 200})
    assert answer.status_code == 200, answer.text
    return [item["message"] for item in answer.json()["messages"]]


def check_told_once(messages: list[dict[str, Any]], children: list[str]) -> None:
    """The parent's conversation tells of each child's end exactly once, in batched notices
    of the seed's wording."""
    notices = [m["content"] for m in messages if m["role"] == "system"]
    assert notices, messages
    assert all(n.startswith("Background subagent updates:\n- ") for n in notices), notices
    lines = [line for notice in notices for line in notice.splitlines()[1:]]
    assert sorted(line.split()[1] for line in lines) == sorted(children), notices
    assert all(line.split()[2] == "succeeded." for line in lines), notices


def at_once(calls: list[dict[str, Any]]) -> list[set[str]]:
    """The runners between their start ("model") and end ("done") after each call, by the
    order of the call log (one append per line, so in real time across processes)."""
    running: set[str] = set()
    seen = []
    for call in calls:
        if "-task-" not in call["session"]:
            continue
        if call["kind"] == "model":
            running.add(call["session"])
        elif call["kind"] == "done":
            running.discard(call["session"])
        seen.append(set(running))
    return seen


def most_at_once(calls: list[dict[str, Any]]) -> int:
    return max(map(len, at_once(calls)), default=0)


async def test_two_servers_on_one_postgres_share_the_cap_and_run_each_child_once(
    pg_cluster: Cluster,
) -> None:
    settings = {"BACKGROUND_CONCURRENCY": "5", "BACKGROUND_POLL": "0.1"}
    servers = await asyncio.gather(
        pg_cluster.start("a", **settings), pg_cluster.start("b", **settings)
    )
    roots = {"A": servers[0].url, "B": servers[1].url}
    children = {root: launched(root, 6) for root in roots}
    samples: list[tuple[int, int]] = []
    claims: dict[str, tuple[int, int]] = {}
    """Each child's (seq, started_at) in the queue, once it was claimed."""
    # (SqlStore imported with the module: importing it on the test's loop would stall it.)
    async with SqlStore(pg_cluster.database_url) as store:

        async def sample() -> None:
            while True:
                samples.append(await store.queue_counts())
                for root in roots:
                    for entry in await store.list_queue(root):
                        if entry.started_at is not None:
                            claims[entry.session_id] = (entry.seq, entry.started_at)
                await asyncio.sleep(0.02)

        sampler = asyncio.create_task(sample())
        try:
            # A's first five run (slowly) when B's six are queued behind A's sixth.
            await start(roots["A"], "A", "6 slow")
            await logged(pg_cluster, "model", *children["A"][:5])
            await start(roots["B"], "B", "6")
            await wait_status(roots["B"], children["B"][-1], "queued", timeout=5)
            async with loopback_client(roots["A"]) as a, loopback_client(roots["B"]) as b:
                seen = [
                    (await client.get(f"/status/{child}")).json()
                    for child in children["A"] + children["B"]
                    for client in (a, b)
                ]
            reads = await asyncio.gather(
                *(read_stream(url, root, timeout=30) for root, url in roots.items())
            )
        finally:
            sampler.cancel()
        left = await store.queue_counts()

    # Either server shows the one queue: five running, the rest queued in order behind them.
    expected = [("running", None)] * 5 + [("queued", position) for position in range(7)]
    assert [(s["status"], s.get("queuePosition")) for s in seen[::2]] == expected
    assert [(s["status"], s.get("queuePosition")) for s in seen[1::2]] == expected
    for read in reads:
        assert read.end == {"status": "completed"}, pg_cluster.logs()
        check_invariants(read.chunks)
    for root, url in roots.items():
        check_told_once(await conversation(url, root), children[root])
        for child in children[root]:
            body = await wait_status(url, child, "completed", timeout=1)
            assert body["output"].startswith("<subagent_background_result>")
    calls = pg_cluster.calls()
    runs = [c["session"] for c in calls if c["kind"] == "model" and "-task-" in c["session"]]
    assert sorted(runs) == sorted(children["A"] + children["B"])  # each child ran once
    # Each root's children ran on its own server.
    pids = {
        root: {c["pid"] for c in calls if c["session"].startswith(f"{root}-")} for root in roots
    }
    assert pids == {"A": {servers[0].pid}, "B": {servers[1].pid}}
    # Never more than five at once, over both servers; five at once at some point, with
    # runners of both servers among them.
    running = [r for _, r in samples]
    assert max(running) == 5, samples
    assert max(q for q, _ in samples) > 5  # more waited than could run
    assert most_at_once(calls) == 5
    assert any({s[0] for s in now} == {"A", "B"} for now in at_once(calls))
    # FIFO across both servers. A claim takes the free places at the head of the whole queue
    # that wait in its own process (a head waiting in the other keeps its place), so the first
    # five queued are the first five to start, and no child starts while more than four queued
    # before it still wait.
    assert set(claims) == set(children["A"] + children["B"])
    by_seq = sorted(claims.values())
    first_five = sorted(by_seq, key=lambda claim: claim[1])[:5]
    assert sorted(seq for seq, _ in first_five) == [seq for seq, _ in by_seq[:5]], by_seq
    for index, (_, started) in enumerate(by_seq):
        jumped = [ahead for ahead in by_seq[:index] if ahead[1] > started]
        assert len(jumped) <= 4, by_seq
    assert left == (0, 0)


async def test_a_killed_server_s_queue_runs_on_under_the_heir_and_each_end_is_told_once(
    cluster: Cluster,
) -> None:
    settings = {**FAST_TAKEOVER, "BACKGROUND_CONCURRENCY": "2", "BACKGROUND_POLL": "0.1"}
    first = await cluster.start("a", **settings)
    root, children = "K", launched("K", 5)
    await start(first.url, root, "5")
    # Two run (in their model call), three wait in the queue, when the server dies.
    await logged(cluster, "model", *children[:2])
    async with loopback_client(first.url) as client:
        queued = [(await client.get(f"/status/{child}")).json() for child in children]
    await first.kill()
    assert [(s["status"], s.get("queuePosition")) for s in queued] == [
        ("running", None),
        ("running", None),
        ("queued", 0),
        ("queued", 1),
        ("queued", 2),
    ]

    heir = await cluster.start("b", **settings)
    status = await wait_status(heir.url, root, "completed", timeout=30)
    for child in children:
        body = await wait_status(heir.url, child, "completed", timeout=1)
        assert body["output"].startswith("<subagent_background_result>")
    messages = await conversation(heir.url, root)
    check_told_once(messages, children)
    for child in children:
        assert status["output"].count(f"- {child} succeeded.") == 1, status["output"]
    whole = await read_stream(heir.url, root)
    assert whole.end == {"status": "completed"}
    check_invariants(whole.chunks)
    calls = cluster.calls()
    runs = [c for c in calls if c["kind"] == "model" and "-task-" in c["session"]]
    # The two running at the kill ran again from their checkpoints under the heir; the queued
    # ones ran once, under the heir, in their order.
    assert sorted(c["session"] for c in runs if c["pid"] == first.pid) == children[:2]
    heirs = [c["session"] for c in runs if c["pid"] == heir.pid]
    # (Two granted by one claim may start in either order.)
    assert sorted(heirs[:2]) == children[:2]
    assert sorted(heirs[2:4]) == children[2:4]
    assert heirs[4:] == children[4:]
    assert most_at_once([c for c in calls if c["pid"] == heir.pid]) == 2


async def test_notices_are_told_once_when_the_kill_falls_in_the_turn_that_reads_them(
    cluster: Cluster,
) -> None:
    settings = {**FAST_TAKEOVER, "BACKGROUND_CONCURRENCY": "5", "BACKGROUND_POLL": "0.1"}
    first = await cluster.start("a", **settings)
    root, children = "R", launched("R", 3)
    await start(first.url, root, "3")
    # The dispatcher has read every notice and is writing its report when the server dies.
    await logged(cluster, "report", root)
    await first.kill()

    heir = await cluster.start("b", **settings)
    status = await wait_status(heir.url, root, "completed", timeout=30)
    messages = await conversation(heir.url, root)
    check_told_once(messages, children)
    for child in children:
        assert status["output"].count(f"- {child} succeeded.") == 1, status["output"]
    whole = await read_stream(heir.url, root)
    assert whole.end == {"status": "completed"}
    check_invariants(whole.chunks)
    calls = cluster.calls()
    reports = [c["pid"] for c in calls if c["kind"] == "report"]
    assert reports == [first.pid, heir.pid]  # the report in flight was written again
    runs = [c["session"] for c in calls if c["kind"] == "model" and "-task-" in c["session"]]
    assert sorted(runs) == children  # no child ran again


async def test_an_idle_parent_s_children_finish_under_the_heir_and_are_told_on_its_next_turn(
    cluster: Cluster,
) -> None:
    """The dispatcher ended its turn without waiting; its server dies with two children running
    and three queued. The heir runs them all; the next turn it is given hears of each once."""
    settings = {**FAST_TAKEOVER, "BACKGROUND_CONCURRENCY": "2", "BACKGROUND_POLL": "0.1"}
    first = await cluster.start("a", **settings)
    root, children = "I", launched("I", 5)
    await start(first.url, root, "5 idle")
    await wait_status(first.url, root, "completed")
    await logged(cluster, "model", *children[:2])
    await first.kill()

    heir = await cluster.start("b", **settings)
    ran = await read_stream(heir.url, root, timeout=30)
    assert ran.end == {"status": "completed"}, cluster.logs()
    for child in children:
        assert (await status(heir.url, child))["status"] == "completed"
    before = await conversation(heir.url, root)
    async with loopback_client(heir.url) as client:
        answer = await client.post(f"/resume/{root}", json={"message": "report"})
    assert answer.status_code == 200, answer.text
    report = await wait_status(heir.url, root, "completed", timeout=20)
    # Nobody was told before the next turn; it was told of each child once.
    assert not [m for m in before if m["role"] == "system"]
    check_told_once(await conversation(heir.url, root), children)
    for child in children:
        assert report["output"].count(f"- {child} succeeded.") == 1, report["output"]
    whole = await read_stream(heir.url, root)
    check_invariants(whole.chunks)
