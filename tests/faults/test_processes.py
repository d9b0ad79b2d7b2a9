"""Issue 17 with real server processes: cases 4-8, and servers killed, frozen and restarted.

Each test drives `uvicorn app.main:app` subprocesses (`tests.faults.processes`), some behind a
TCP proxy (`tests.faults.proxy`) in front of PostgreSQL or of a remote server. Waits are polled
conditions with bounds; a test collects what it saw and asserts at the end, so a failure says
everything that went wrong at once.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.engine import make_url

from tests.databases import postgres_database
from tests.e2e.agents import EXPECTED_OUTPUT
from tests.e2e.conftest import free_port, loopback_client
from tests.faults.processes import (
    FAST_TAKEOVER,
    Fleet,
    check_over_http,
    committed_calls,
    open_fleet,
    repeated_after,
    start_run,
    status,
    tree_statuses,
    wait_for_calls,
    wait_until_stopped,
)
from tests.faults.proxy import TcpProxy

pytestmark = pytest.mark.slow

RESEARCH_CHILD = "{root}-remote-call-0-0"
"""The remote child of an orchestrator (its call gets the runtime's id `call-0-0`)."""


def checker_call(call: dict[str, Any]) -> bool:
    """A checker's model call: the whole tree is at work."""
    return bool(call["kind"] == "model" and call["session"].count("-sub-") == 2)


async def quiet(fleet: Fleet, *, idle: float, most: float) -> None:
    """Wait until nothing is logged for `idle` seconds (at most `most` seconds)."""
    deadline = time.monotonic() + most
    seen, since = len(fleet.calls()), time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < idle:
        await asyncio.sleep(0.05)
        now = len(fleet.calls())
        if now != seen:
            seen, since = now, time.monotonic()


# -- case 4 -----------------------------------------------------------------------------------


async def _readyz(url: str, *, timeout: float) -> tuple[int | str, float]:
    """/readyz's status code (or what went wrong) and how long the answer took."""
    started = time.monotonic()
    try:
        async with loopback_client(url, timeout=timeout) as client:
            code: int | str = (await client.get("/readyz")).status_code
    except httpx.HTTPError as exc:
        code = type(exc).__name__
    return code, time.monotonic() - started


async def test_case_4_dead_postgres_connections_never_wedge_the_server(tmp_path: Path) -> None:
    seen: dict[str, Any] = {}
    async with (
        postgres_database() as database,
        TcpProxy("127.0.0.1", make_url(database).port or 5432) as proxy,
        open_fleet(tmp_path, "postgres") as fleet,
    ):
        through_proxy = make_url(database).set(host="127.0.0.1", port=proxy.port)
        server = await fleet.start(
            "a",
            url=through_proxy.render_as_string(hide_password=False),
            SERVER_ID="a",
            **FAST_TAKEOVER,
        )
        await start_run(server.url, "lead", "p4")
        await wait_for_calls(fleet, 3, match=checker_call)
        # A 5 s partition that leaves the connections it caught half-open for good.
        proxy.blackhole(existing=True, new=True)
        partitioned = time.monotonic()
        seen["readyz during the partition"] = await _readyz(server.url, timeout=15)
        await asyncio.sleep(max(0.0, 5 - (time.monotonic() - partitioned)))
        await proxy.heal(caught=False)

        caught = await wait_until_stopped(server.url, "p4", timeout=30)
        seen["the caught run"] = caught and (caught["status"], caught["output"])
        try:
            async with asyncio.timeout(10):
                await start_run(server.url, "lead", "p4-after")
            after = await wait_until_stopped(server.url, "p4-after", timeout=30)
            seen["a run started after"] = after and (after["status"], after["output"])
        except (TimeoutError, httpx.HTTPError, AssertionError) as exc:
            seen["a run started after"] = f"/start failed: {type(exc).__name__}: {exc}"
        seen["readyz after"] = await _readyz(server.url, timeout=10)
        seen["SIGTERM stops it within 10 s"] = await server.terminate(grace=10)
        log = fleet.logs()

    code, took = seen["readyz during the partition"]
    problems = []
    if code != 503 or took > 10:
        problems.append(f"/readyz during the partition answered {code} after {took:.1f}s")
    if seen["the caught run"] is None:
        problems.append("the run caught by the partition never stopped")
    if seen["a run started after"] != ("completed", EXPECTED_OUTPUT):
        problems.append(f"a run started after the partition: {seen['a run started after']}")
    if seen["readyz after"][0] != 200:
        problems.append(f"/readyz after the partition answered {seen['readyz after']}")
    if not seen["SIGTERM stops it within 10 s"]:
        problems.append("SIGTERM did not stop the server within 10 s")
    assert problems == [], "\n".join([*problems, log])


async def test_postgres_connections_reset_and_refused_for_two_seconds(tmp_path: Path) -> None:
    # The partition's kind cousin: every connection reset, new ones refused for 2 s, then the
    # database is back. The run is taken over from its last committed step and completes.
    async with (
        postgres_database() as database,
        TcpProxy("127.0.0.1", make_url(database).port or 5432) as proxy,
        open_fleet(tmp_path, "postgres") as fleet,
    ):
        through_proxy = make_url(database).set(host="127.0.0.1", port=proxy.port)
        server = await fleet.start(
            "a",
            url=through_proxy.render_as_string(hide_password=False),
            SERVER_ID="a",
            **FAST_TAKEOVER,
        )
        await start_run(server.url, "lead", "p4r")
        await wait_for_calls(fleet, 3, match=checker_call)
        await proxy.refuse()
        proxy.reset()
        await asyncio.sleep(2)
        await proxy.heal()
        done = await wait_until_stopped(server.url, "p4r", timeout=40)
        violations = await check_over_http(server.url, "p4r") if done else []
        log = fleet.logs()
    assert done is not None, f"the run never stopped\n{log}"
    assert (done["status"], done["output"]) == ("completed", EXPECTED_OUTPUT), log
    assert violations == [], log


# -- cases 5 and 6: remote servers -------------------------------------------------------------


async def _remote_restart(tmp_path: Path, delay: float) -> None:
    """Kill the remote server in the middle of its child's stream, start it again on the same
    port `delay` seconds later: the parent waits, continues the stream, and gets the output;
    the remote child runs no committed call again."""
    port = free_port()
    async with open_fleet(tmp_path) as fleet:
        remote = await fleet.start("remote", database="remote", port=port, SERVER_ID="remote")
        parent = await fleet.start(
            "parent", database="parent", SERVER_ID="parent", FAULT_REMOTE_URL=remote.url
        )
        await start_run(parent.url, "orchestrator", "o5")
        child = RESEARCH_CHILD.format(root="o5")
        await wait_for_calls(
            fleet, 2, match=lambda c: c["session"] == child and c["kind"] == "tool"
        )
        await remote.kill()
        killed_at = len(fleet.calls())
        committed = await committed_calls(await fleet.database("remote"), child)
        await asyncio.sleep(delay)
        again = await fleet.start("remote-again", database="remote", port=port, SERVER_ID="remote")
        done = await wait_until_stopped(parent.url, "o5", timeout=60)
        violations = await check_over_http(parent.url, "o5") if done else []
        remote_child = await status(again.url, child)
        repeats = repeated_after(fleet.calls(), killed_at, committed)
        log = fleet.logs()

    assert done is not None, f"the parent never stopped\n{log}"
    assert str(done["output"]).startswith("findings="), (done["output"], log)
    assert [(r["subSessionId"], r["status"]) for r in done["subSessions"]] == [
        (child, "completed")
    ], log
    assert remote_child["status"] == "completed"
    assert violations == [], log
    assert repeats == [], "committed calls of the remote child ran again after its restart"


async def test_case_5_a_remote_parent_waits_for_a_remote_server_restarting_4s_later(
    tmp_path: Path,
) -> None:
    await _remote_restart(tmp_path, 4.0)


async def test_a_remote_parent_waits_for_a_remote_server_restarting_1s_later(
    tmp_path: Path,
) -> None:
    await _remote_restart(tmp_path, 1.0)


@pytest.mark.long
async def test_a_remote_parent_waits_for_a_remote_server_restarting_30s_later(
    tmp_path: Path,
) -> None:
    await _remote_restart(tmp_path, 30.0)


async def test_case_6_a_half_open_connection_to_a_remote_server_never_hangs_the_parent(
    tmp_path: Path,
) -> None:
    async with open_fleet(tmp_path) as fleet:
        remote = await fleet.start("remote", database="remote", SERVER_ID="remote")
        async with TcpProxy("127.0.0.1", remote.port) as proxy:
            parent = await fleet.start(
                "parent",
                database="parent",
                SERVER_ID="parent",
                FAULT_REMOTE_URL=f"http://{proxy.url_host}",
            )
            await start_run(parent.url, "orchestrator", "o6")
            child = RESEARCH_CHILD.format(root="o6")
            await wait_for_calls(
                fleet, 2, match=lambda c: c["session"] == child and c["kind"] == "tool"
            )
            # The connections open now go silent for good; new ones get through. The remote
            # server sends a heartbeat every 0.5 s (STREAM_HEARTBEAT): silence says it all.
            proxy.blackhole(existing=True, new=False)
            done = await wait_until_stopped(parent.url, "o6", timeout=20)
            log = fleet.logs()
    assert done is not None, f"the parent still waits on a silent connection\n{log}"
    assert str(done["output"]).startswith("findings="), (done["output"], log)


# -- cases 7 and 8: two servers on one PostgreSQL ----------------------------------------------


async def test_case_7_interrupting_an_orphaned_run_reaches_its_children(tmp_path: Path) -> None:
    async with open_fleet(tmp_path, "postgres") as fleet:
        a = await fleet.start("a", SERVER_ID="a", **FAST_TAKEOVER)
        b = await fleet.start("b", SERVER_ID="b", **FAST_TAKEOVER)
        await start_run(a.url, "lead", "k7")
        await wait_for_calls(fleet, 3, match=checker_call)
        await a.kill()
        async with loopback_client(b.url) as client:
            asked = await client.post("/interrupt/k7", json={"reason": "stop it"})
        root = await wait_until_stopped(b.url, "k7", timeout=20)
        deadline = time.monotonic() + 10
        tree = await tree_statuses(b.url, "k7")
        while time.monotonic() < deadline and any(
            body["status"] == "running" for body in tree.values()
        ):
            await asyncio.sleep(0.1)
            tree = await tree_statuses(b.url, "k7")
        running = sorted(sid for sid, body in tree.items() if body["status"] == "running")
        # An interrupt posted to one of them directly must reach it too.
        direct: dict[str, Any] = {}
        if running:
            async with loopback_client(b.url) as client:
                answer = await client.post(f"/interrupt/{running[0]}", json={})
            direct = {"answer": answer.status_code}
            await asyncio.sleep(3)
            direct["status"] = (await status(b.url, running[0]))["status"]
        log = fleet.logs()

    assert asked.status_code == 202, asked.text
    assert root is not None, log
    assert root["status"] == "interrupted", (root, log)
    assert running == [], (
        f"sessions still running {running} under an interrupted root; "
        f"/interrupt/{running[0] if running else ''} directly: {direct}"
    )


async def test_case_8_a_stale_owner_never_repeats_committed_tool_calls(tmp_path: Path) -> None:
    async with open_fleet(tmp_path, "postgres") as fleet:
        a = await fleet.start("a", SERVER_ID="a", **FAST_TAKEOVER)
        b = await fleet.start("b", SERVER_ID="b", **FAST_TAKEOVER)
        await start_run(a.url, "batch", "k8")
        # Freeze A while its model thinks (half a second): its answer, and the five tool
        # calls it asks for, come after the thaw, when B has run and committed them all.
        await wait_for_calls(fleet, 1, match=lambda c: c["kind"] == "model" and c["pid"] == a.pid)
        a.freeze()
        done = await wait_until_stopped(b.url, "k8", timeout=40)
        committed = await committed_calls(await fleet.database("main"), "k8")
        thawed_at = len(fleet.calls())
        a.thaw()
        await quiet(fleet, idle=1.5, most=8)
        calls = fleet.calls()
        violations = await check_over_http(b.url, "k8") if done else []
        await a.kill()
        log = fleet.logs()

    assert done is not None, log
    assert (done["status"], done["output"]) == ("completed", "stamped 15"), log
    stale = [(c["kind"], c["session"], c["key"]) for c in calls[thawed_at:] if c["pid"] == a.pid]
    assert repeated_after(calls, thawed_at, committed) == [], (
        f"the thawed owner ran {len(stale)} committed calls again: {stale}"
    )
    assert stale == [], f"the thawed owner made calls after losing its lease: {stale}"
    assert violations == [], log


# -- servers killed and restarted ---------------------------------------------------------------


async def _kill_then_restart(tmp_path: Path, delay: float) -> None:
    """SIGKILL the server mid-run (SQLite), start it again `delay` s later with the same id:
    the run completes exactly, no committed call runs again, the stream is whole."""
    async with open_fleet(tmp_path) as fleet:
        server = await fleet.start("a", SERVER_ID="a")
        await start_run(server.url, "lead", "r1")
        await wait_for_calls(fleet, 3, match=checker_call)
        await server.kill()
        killed_at = len(fleet.calls())
        committed = await committed_calls(await fleet.database("main"), "r1")
        await asyncio.sleep(delay)
        again = await fleet.start("a-again", SERVER_ID="a")
        done = await wait_until_stopped(again.url, "r1", timeout=30)
        violations = await check_over_http(again.url, "r1") if done else []
        repeats = repeated_after(fleet.calls(), killed_at, committed)
        log = fleet.logs()
    assert done is not None, f"the run never stopped after the restart\n{log}"
    assert (done["status"], done["output"]) == ("completed", EXPECTED_OUTPUT), log
    assert violations == [], log
    assert repeats == [], "committed calls ran again after the restart"


@pytest.mark.parametrize("delay", [1.0, 5.0], ids=["1s", "5s"])
async def test_a_server_killed_mid_run_and_restarted_later_finishes_exactly(
    tmp_path: Path, delay: float
) -> None:
    await _kill_then_restart(tmp_path, delay)


@pytest.mark.long
async def test_a_server_killed_mid_run_and_restarted_30s_later_finishes_exactly(
    tmp_path: Path,
) -> None:
    await _kill_then_restart(tmp_path, 30.0)
