"""Real server processes for the process-level fault tests, and what they are checked against.

`Fleet` starts `uvicorn app.main:app` subprocesses (the agents of `tests.faults.agents`) on
given or free loopback ports, each on a database of its own or a shared one, all logging their
model and tool calls to one call log with their process ids. It can start a server again on the
same port (a restart), and SIGKILL, SIGSTOP and SIGCONT them. Every process is gone when the
fleet closes, whatever the test did.

`check_over_http` reads a finished run as a client would (`/status` of the whole tree, the
stream over SSE to its `event: end`) and applies the invariants of `tests.faults.invariants`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import httpx

from app.protocol import STOPPED_STATUSES, AssistantMessage, ToolMessage
from app.store import create_store
from tests.databases import database_url
from tests.e2e.agents import CALL_LOG_ENV
from tests.e2e.conftest import (
    ROOT,
    ServerProcess,
    free_port,
    loopback_client,
    read_stream,
    server_command,
    server_env,
)
from tests.faults.invariants import Violation, check_stream

AGENT_MODULE = "tests.faults.agents:registry"
START_TIMEOUT = 30.0


class Takeover(TypedDict):
    LEASE_SECONDS: str
    TAKEOVER_INTERVAL: str


FAST_TAKEOVER = Takeover(LEASE_SECONDS="2", TAKEOVER_INTERVAL="0.25")
"""Another server may take a session over 2 s after its owner last renewed the lease."""


@dataclass
class Server(ServerProcess):
    """One server process, on a port it may be restarted on."""

    port: int = 0

    def freeze(self) -> None:
        """SIGSTOP: the process stops where it is, its sockets open."""
        self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT: it goes on as if nothing had happened."""
        self.process.send_signal(signal.SIGCONT)

    async def terminate(self, grace: float) -> bool:
        """SIGTERM; whether it exited within `grace` seconds (it is killed otherwise)."""
        if self.process.returncode is not None:
            return True
        self.process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.process.wait(), grace)
        except TimeoutError:
            await self.kill()
            return False
        return True


@dataclass
class Fleet:
    """Server processes for one test, their databases and their shared call log."""

    folder: Path
    backend: str
    databases: dict[str, str] = field(default_factory=dict)
    servers: list[Server] = field(default_factory=list)
    _exits: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)

    @property
    def call_log(self) -> Path:
        return self.folder / "calls.jsonl"

    async def database(self, name: str) -> str:
        """The URL of database `name` (created empty on first use)."""
        if name not in self.databases:
            folder = self.folder / name
            folder.mkdir(parents=True, exist_ok=True)
            url = await self._exits.enter_async_context(database_url(self.backend, folder))
            self.databases[name] = url
        return self.databases[name]

    async def start(
        self,
        name: str,
        *,
        database: str = "main",
        url: str | None = None,
        port: int | None = None,
        **settings: str,
    ) -> Server:
        """Start server `name` on `port` (a free one if None) over `database` (or the database
        `url`), and wait until it answers /readyz."""
        env = server_env(url or await self.database(database), **settings)
        env["AGENT_MODULE"] = AGENT_MODULE
        env[CALL_LOG_ENV] = str(self.call_log)
        chosen = port or free_port()
        log_path = self.folder / f"server-{name}.log"
        with log_path.open("ab") as log:
            process = await asyncio.create_subprocess_exec(
                *server_command(chosen),
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        server = Server(name, f"http://127.0.0.1:{chosen}", process, log_path, port=chosen)
        self.servers.append(server)
        if not await _ready(server):
            raise AssertionError(f"server {name} did not start\n{server.log()}")
        return server

    def calls(self) -> list[dict[str, Any]]:
        """Every model and tool call logged so far, in order."""
        if not self.call_log.exists():
            return []
        return [json.loads(line) for line in self.call_log.read_text().splitlines()]

    def logs(self) -> str:
        """Every server's log tail."""
        return "\n".join(server.log() for server in self.servers)

    async def close(self) -> None:
        for server in self.servers:
            if server.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    server.thaw()
        await asyncio.gather(*(server.stop() for server in self.servers))
        await self._exits.aclose()


@contextlib.asynccontextmanager
async def open_fleet(folder: Path, backend: str = "sqlite") -> AsyncIterator[Fleet]:
    """A fleet whose processes are all gone (and databases dropped) when the block ends."""
    fleet = Fleet(folder, backend)
    try:
        yield fleet
    finally:
        await fleet.close()


async def _ready(server: Server) -> bool:
    deadline = time.monotonic() + START_TIMEOUT
    async with loopback_client(server.url, timeout=2) as client:
        while time.monotonic() < deadline:
            if server.process.returncode is not None:
                return False
            with contextlib.suppress(httpx.TransportError):
                if (await client.get("/readyz")).status_code == 200:
                    return True
            await asyncio.sleep(0.05)
    await server.kill()
    return False


async def start_run(url: str, agent_type: str, session_id: str, message: str = "go") -> None:
    """POST /start, expecting 201."""
    async with loopback_client(url) as client:
        started = await client.post(
            "/start", json={"agentType": agent_type, "message": message, "sessionId": session_id}
        )
    assert started.status_code == 201, started.text


async def status(url: str, session_id: str, *, timeout: float = 5.0) -> dict[str, Any]:
    """GET /status."""
    async with loopback_client(url, timeout=timeout) as client:
        answer = await client.get(f"/status/{session_id}")
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def tree_statuses(url: str, root: str) -> dict[str, dict[str, Any]]:
    """`/status` of every session of the tree (remote children excepted), by id."""
    found: dict[str, dict[str, Any]] = {}
    queue = [root]
    while queue:
        session_id = queue.pop()
        body = await status(url, session_id)
        found[session_id] = body
        queue += [
            ref["subSessionId"]
            for ref in body["subSessions"]
            if ref.get("remote") is None and ref["subSessionId"] not in found
        ]
    return found


async def wait_until_stopped(url: str, session_id: str, *, timeout: float) -> dict[str, Any] | None:
    """Poll /status until the session has stopped; None if it has not within `timeout`
    (or the server never answered)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError, AssertionError):
            body = await status(url, session_id, timeout=min(5.0, timeout))
            if body["status"] in STOPPED_STATUSES:
                return body
        await asyncio.sleep(0.1)
    return None


async def wait_for_calls(
    fleet: Fleet,
    count: int,
    *,
    match: Callable[[dict[str, Any]], bool],
    timeout: float = 30.0,
) -> None:
    """Wait until `count` logged calls satisfy `match`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sum(1 for call in fleet.calls() if match(call)) >= count:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never {count} matching calls\n{fleet.logs()}")


async def check_over_http(url: str, root: str) -> list[Violation]:
    """The invariants of a stopped run, as a client reads it: every session of its tree
    stopped, refs that agree, and a stream that ends with `event: end`, contiguous, closed."""
    found: list[Violation] = []
    tree = await tree_statuses(url, root)
    for session_id, body in tree.items():
        if body["status"] == "running":
            found.append(Violation("running", f"{session_id} is running"))
        for ref in body["subSessions"]:
            child = tree.get(ref["subSessionId"])
            if child is not None and child["status"] != ref["status"]:
                found.append(
                    Violation(
                        "ref_mismatch",
                        f"ref of {ref['subSessionId']} says {ref['status']}, "
                        f"the session {child['status']}",
                    )
                )
    try:
        read = await read_stream(url, root, timeout=15)
    except TimeoutError:
        return [*found, Violation("stream_not_ended", f"{root}: no event: end within 15 s")]
    if read.end is None:
        found.append(Violation("stream_not_ended", f"{root}: no event: end ({read.broken})"))
    if read.ids != [str(chunk.sequence) for chunk in read.chunks]:
        found.append(Violation("sse_ids", f"{root}: SSE ids differ from sequences"))
    found += check_stream(read.chunks, root, tree[root]["status"])
    return found


async def committed_calls(database: str, root: str) -> set[tuple[str, str, str]]:
    """The model calls `(model, session, turn)` and tool calls `(tool, session, call id)` whose
    results the database holds for the tree of `root`, in the call log's terms. Read in a thread
    with a loop of its own (opening a store stalls a loop for a tenth of a second)."""
    return await asyncio.to_thread(asyncio.run, _committed_calls(database, root))


async def _committed_calls(database: str, root: str) -> set[tuple[str, str, str]]:
    found: set[tuple[str, str, str]] = set()
    async with create_store(database) as store:
        sessions = [root]
        for session_id in sessions:
            sessions += [ref.sub_session_id for ref in await store.get_sub_session_refs(session_id)]
        for session_id in sessions:
            turns = 0
            for message in await store.load_messages(session_id):
                if isinstance(message, AssistantMessage):
                    found.add(("model", session_id, str(turns)))
                    turns += 1
                elif isinstance(message, ToolMessage):
                    found.add(("tool", session_id, message.tool_call_id))
    return found


def repeated_after(
    calls: list[dict[str, Any]], mark: int, committed: set[tuple[str, str, str]]
) -> list[tuple[str, str, str]]:
    """Calls logged after position `mark` of the call log whose results were already
    committed (as `(kind, session, key)`)."""
    return [
        (c["kind"], c["session"], c["key"])
        for c in calls[mark:]
        if (c["kind"], c["session"], c["key"]) in committed
    ]
