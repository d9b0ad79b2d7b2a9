"""Schemathesis, with all its checks, finds nothing: the server answers what its OpenAPI
document says, on SQLite and on PostgreSQL, and what it refused left nothing behind.

Each pass runs the `schemathesis` command line, as a person checking the API would, against a
real server serving the demo agents: its examples, its coverage phase (boundary values, missing
and malformed parameters, other methods), fuzzing with valid and invalid requests, and stateful
sequences that follow the document's links from `POST /start` to the session it created. The
document names each agent with the input it takes, so valid starts run real sessions, which
`/status`, `/stream`, `/interrupt` and `/resume` then reach, and so do the chat endpoints (an
example turn per agent), whose answers are streams checked event by event. The PostgreSQL pass
also sets an API key, which the `ignored_auth` check probes. The HAR report counts the requests
and tells which starts and turns were accepted; afterwards the database must hold exactly those
sessions and their trees.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from tests.e2e.conftest import ROOT, open_cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
FUZZING_EXAMPLES = 100
"""Cases per operation in the fuzzing phase. Generating them, not serving them, is what a pass
costs (the server spends about a tenth of it): a chat turn's free-form messages take the
fuzzer 50 to 130 ms each. At 300, as for the first 8 operations, the 16 take 80 s a pass."""
STATEFUL_EXAMPLES = 200
"""Scenarios of the stateful phase, which follow the document's links from a start to the
session it made: the live sessions. With the examples and the coverage phase (every boundary
value, missing and malformed parameter and other method, whatever the numbers): 3,500 to
4,500 requests per pass, 70 to 90 seconds each on two busy cores."""
MIN_REQUESTS = 2000
SEED = 18
FUZZ_TIMEOUT = 420.0
LIVE = ("GET /status", "GET /stream", "POST /interrupt", "POST /resume")
"""Operations on a session: the fuzzer must reach live ones, not only unknown ids."""
CHATS = {"POST /ai-sdk": "id", "POST /ag-ui": "threadId"}
"""The chat endpoints, whose turn starts a session for a new id: where their body names it."""


async def fuzz(url: str, folder: Path, *, api_key: str | None) -> tuple[list[dict[str, Any]], str]:
    """Run schemathesis against `url`; its HAR entries and its output."""
    report = folder / "fuzz.har.json"
    config = folder / "schemathesis.toml"
    config.write_text(
        f"[phases.fuzzing.generation]\nmax-examples = {FUZZING_EXAMPLES}\n\n"
        f"[phases.stateful.generation]\nmax-examples = {STATEFUL_EXAMPLES}\n"
    )
    command = [
        str(SCHEMATHESIS),
        f"--config-file={config}",
        "run",
        f"{url}/openapi.json",
        "--checks=all",
        f"--seed={SEED}",
        "--generation-database=none",
        "--request-timeout=30",
        "--no-color",
        "--report=har",
        f"--report-har-path={report}",
    ]
    if api_key is not None:
        command.append(f"--header=Authorization: Bearer {api_key}")
    env = {
        **os.environ,
        "SCHEMATHESIS_HOOKS": "tests.e2e.fuzz_hooks",
        "PYTHONPATH": str(ROOT),
        "NO_PROXY": "*",
    }
    process = await asyncio.create_subprocess_exec(
        *command,
        cwd=folder,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        output, _ = await asyncio.wait_for(process.communicate(), FUZZ_TIMEOUT)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    text = output.decode(errors="replace")
    assert process.returncode == 0, text[-12000:]
    return json.loads(report.read_text())["log"]["entries"], text


def operation(entry: dict[str, Any]) -> str:
    """`METHOD /first-segment` of a HAR entry."""
    path = "/" + entry["request"]["url"].split("/", 3)[3].split("?")[0]
    return f"{entry['request']['method']} /{path.split('/')[1]}"


async def stored(database_url: str) -> dict[str, set[tuple[str, ...]]]:
    """What the database holds that a request could have written, table by table."""
    queries = {
        "sessions": "SELECT session_id, stream_id FROM sessions",
        "messages": "SELECT DISTINCT session_id FROM messages",
        "streams": "SELECT stream_id FROM streams",
        "chunks": "SELECT DISTINCT stream_id FROM chunks",
        "refs": "SELECT parent_session_id, sub_session_id FROM sub_session_refs",
        "flags": "SELECT session_id FROM interrupt_flags",
    }
    engine = create_async_engine(database_url, poolclass=NullPool)
    try:
        async with engine.connect() as connection:
            return {
                table: {tuple(row) for row in await connection.exec_driver_sql(query)}
                for table, query in queries.items()
            }
    finally:
        await engine.dispose()


async def fuzz_pass(
    backend: str, api_key: str | None, folder: Path
) -> tuple[list[dict[str, Any]], str, dict[str, set[tuple[str, ...]]]]:
    """Fuzz a demo server on a fresh database of `backend`; the requests, the fuzzer's output,
    and what the database held once the server had stopped."""
    async with open_cluster(backend, folder) as cluster:
        settings = {"AGENT_MODULE": "app.demo:registry", "DEMO_LATENCY": "0.01"}
        if api_key is not None:
            settings["API_KEY"] = api_key
        server = await cluster.start("fuzzed", **settings)
        entries, output = await fuzz(server.url, folder, api_key=api_key)
        await server.stop()
        return entries, output, await stored(cluster.database_url)


@pytest.mark.parametrize(("backend", "api_key"), [("sqlite", None), ("postgres", "fuzz-key")])
def test_schemathesis_with_all_checks_finds_nothing(
    backend: str, api_key: str | None, tmp_path: Path
) -> None:
    # Synchronous, like the fuzzer: the server under test is another process, and this one
    # only waits for a minute, so its own event loop has nothing to prove.
    entries, output, held = asyncio.run(fuzz_pass(backend, api_key, tmp_path))
    answers = Counter((operation(entry), entry["response"]["status"]) for entry in entries)
    summary = f"{len(entries)} requests: {sorted(answers.items())}\n{output[-3000:]}"
    print(summary)  # the figures, with -s
    assert len(entries) >= MIN_REQUESTS, summary
    for live in LIVE:
        assert sum(n for (op, status), n in answers.items() if op == live and status < 300), live
    created = [
        json.loads(entry["response"]["content"]["text"])["sessionId"]
        for entry in entries
        if operation(entry) == "POST /start" and entry["response"]["status"] == 201
    ]
    assert len(created) == len(set(created)) > 0
    chatted = {
        json.loads(entry["request"]["postData"]["text"])[CHATS[operation(entry)]]
        for entry in entries
        if operation(entry) in CHATS and entry["response"]["status"] == 200
    }
    assert chatted, "no chat turn was accepted"
    # Refused requests wrote nothing: the database holds the accepted starts and chat turns,
    # and their trees.
    sessions = {session_id for session_id, _ in held["sessions"]}
    roots = {session_id for session_id, stream_id in held["sessions"] if session_id == stream_id}
    assert roots == set(created) | chatted
    assert {stream_id for _, stream_id in held["sessions"]} <= roots
    assert {row[0] for row in held["streams"] | held["chunks"]} <= roots
    assert {row[0] for row in held["messages"] | held["flags"]} <= sessions
    assert {cell for row in held["refs"] for cell in row} <= sessions
