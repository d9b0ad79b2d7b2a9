"""End-to-end fixtures: real `uvicorn app.main:app` processes on loopback, over one database.

A `Cluster` is a fresh database (SQLite file or PostgreSQL database, see `tests.databases`)
plus the servers a test starts on it, each a subprocess on a free loopback port serving the
agents of `tests.e2e.agents`, with its output in a log file. Every server is stopped (and killed
if it does not stop) before the database goes away, whatever the test did. Waits on processes and
sockets are asyncio waits, bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx
import pytest
from httpx_sse import aconnect_sse

from app.protocol import Chunk, chunk_from_json
from app.settings import Settings
from tests.databases import database_url
from tests.e2e.agents import CALL_LOG_ENV

ROOT = Path(__file__).resolve().parents[2]
AGENT_MODULE = "tests.e2e.agents:registry"
START_TIMEOUT = 30.0
"""Seconds a server may take to import, migrate its store and answer /readyz."""


def loopback_client(base_url: str, *, timeout: float = 10.0) -> httpx.AsyncClient:
    """A client for a server of this test: plain HTTP on loopback, so no CA bundle is loaded
    (that costs 50 ms of CPU per client, on the event loop) and no proxy from the environment."""
    return httpx.AsyncClient(base_url=base_url, timeout=timeout, verify=False, trust_env=False)


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def server_env(database_url: str, **settings: str) -> dict[str, str]:
    """This process's environment without any server setting or real model, plus `settings`."""
    ours = {name.upper() for name in Settings.model_fields}
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ours and not key.startswith(("MODEL_", "DEMO_"))
    }
    env.update(
        DATABASE_URL=database_url,
        AGENT_MODULE=AGENT_MODULE,
        STREAM_HEARTBEAT="0.5",
        STREAM_POLL="0.5",
        PYTHONUNBUFFERED="1",
    )
    env.update(settings)
    return env


def server_command(port: int, workers: int = 1) -> list[str]:
    """The command line of a server on `port`: uvicorn itself, or with several workers the
    server command (`python -m app.serve`), which also checks and migrates before forking."""
    if workers > 1:
        return [
            sys.executable,
            "-m",
            "app.serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            str(workers),
        ]
    return [
        sys.executable,
        "-m",
        "uvicorn",
        "app.main:app",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warning",
        "--no-access-log",
        "--timeout-graceful-shutdown",
        "1",
    ]


def _open_log(path: Path) -> IO[bytes]:
    return path.open("ab")


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class ServerProcess:
    """One running server."""

    name: str
    url: str
    process: asyncio.subprocess.Process
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        """The end of what the server printed."""
        return f"--- {self.name} (pid {self.pid}) log ---\n{_tail(self.log_path)}"

    async def kill(self) -> None:
        """SIGKILL the server and wait until it is gone."""
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGKILL)
        await asyncio.wait_for(self.process.wait(), 10)

    async def stop(self) -> None:
        """Stop the server gracefully, or kill it after a few seconds."""
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), 5)
            except TimeoutError:
                await self.kill()


@dataclass
class Cluster:
    """Servers sharing one database; the agents' calls are logged to `call_log`."""

    backend: str
    database_url: str
    folder: Path
    servers: list[ServerProcess] = field(default_factory=list)

    @property
    def call_log(self) -> Path:
        return self.folder / "calls.jsonl"

    async def start(self, name: str, *, workers: int = 1, **settings: str) -> ServerProcess:
        """Start a server named `name` (with `workers` worker processes) with extra settings
        (e.g. SERVER_ID="a") and wait until it answers /readyz."""
        env = server_env(self.database_url, **settings)
        env[CALL_LOG_ENV] = str(self.call_log)
        log_path = self.folder / f"server-{name}.log"
        for _attempt in range(3):
            port = free_port()
            log = _open_log(log_path)
            try:
                process = await asyncio.create_subprocess_exec(
                    *server_command(port, workers),
                    cwd=ROOT,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            finally:
                log.close()
            server = ServerProcess(name, f"http://127.0.0.1:{port}", process, log_path)
            self.servers.append(server)
            if await _ready(server):
                return server
            if "address already in use" not in _tail(log_path).lower():
                break  # another port would not help
        raise AssertionError(f"server {name} did not start\n{server.log()}")

    def calls(self) -> list[dict[str, Any]]:
        """Every model and tool call logged so far, in order."""
        if not self.call_log.exists():
            return []
        return [json.loads(line) for line in self.call_log.read_text().splitlines()]

    def logs(self) -> str:
        """Every server's log tail, for assertion messages."""
        return "\n".join(server.log() for server in self.servers)

    async def close(self) -> None:
        await asyncio.gather(*(server.stop() for server in self.servers))


async def _ready(server: ServerProcess) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + START_TIMEOUT
    async with loopback_client(server.url, timeout=2) as client:
        while loop.time() < deadline:
            if server.process.returncode is not None:
                return False
            with contextlib.suppress(httpx.TransportError):
                if (await client.get("/readyz")).status_code == 200:
                    return True
            await asyncio.sleep(0.05)
    await server.kill()
    return False


@pytest.fixture(scope="session", autouse=True)
def _warm_http_stack() -> None:
    """Make a first request before any test's event loop runs: httpx imports its HTTP stack
    (httpcore, h11, anyio's backend) on first use, tens of ms that would stall a test's loop."""

    async def knock() -> None:
        async with loopback_client(f"http://127.0.0.1:{free_port()}", timeout=1) as client:
            with contextlib.suppress(httpx.TransportError):
                await client.get("/")

    asyncio.run(knock())


@contextlib.asynccontextmanager
async def open_cluster(backend: str, folder: Path) -> AsyncIterator[Cluster]:
    """A fresh database of `backend`; its servers are all stopped before it goes away."""
    async with database_url(backend, folder) as url:
        cluster = Cluster(backend, url, folder)
        try:
            yield cluster
        finally:
            await cluster.close()


@pytest.fixture(params=["sqlite", "postgres"])
async def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Cluster]:
    """A cluster on each SQL backend."""
    async with open_cluster(request.param, tmp_path) as opened:
        yield opened


@pytest.fixture
async def pg_cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    """A cluster on PostgreSQL, which several servers can share."""
    async with open_cluster("postgres", tmp_path) as opened:
        yield opened


@dataclass
class Read:
    """What one SSE connection delivered."""

    chunks: list[Chunk] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    end: dict[str, Any] | None = None
    broken: str | None = None
    """How the connection broke, if the server went away mid-stream."""

    @property
    def last_id(self) -> str:
        return self.ids[-1]


async def read_stream(
    base_url: str,
    stream_id: str,
    *,
    last_event_id: str | None = None,
    stop_after: int | None = None,
    on_chunk: Callable[[Read], Awaitable[None]] | None = None,
    timeout: float = 30.0,
) -> Read:
    """Read `/stream/{stream_id}` to its end event, or hang up after `stop_after` chunks.

    Comment heartbeats (events without data) are skipped. A connection the server drops is
    reported in `broken`. `on_chunk(read)` is called after each chunk.
    """
    read = Read()
    headers = {} if last_event_id is None else {"Last-Event-ID": last_event_id}
    async with loopback_client(base_url) as client:
        try:
            async with asyncio.timeout(timeout):
                async with aconnect_sse(
                    client, "GET", f"/stream/{stream_id}", headers=headers
                ) as source:
                    source.response.raise_for_status()
                    async for event in source.aiter_sse():
                        if not event.data:
                            continue
                        if event.event == "end":
                            read.end = json.loads(event.data)
                            break
                        read.chunks.append(chunk_from_json(event.data))
                        read.ids.append(event.id)
                        if on_chunk is not None:
                            await on_chunk(read)
                        if stop_after is not None and len(read.chunks) == stop_after:
                            break
        except httpx.TransportError as exc:
            read.broken = f"{type(exc).__name__}: {exc}"
    return read


async def wait_status(
    base_url: str, session_id: str, status: str, *, timeout: float = 30.0
) -> dict[str, Any]:
    """Poll /status until the session has `status`; fail after `timeout` seconds."""
    body: dict[str, Any] = {}
    async with loopback_client(base_url, timeout=5) as client:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            body = (await client.get(f"/status/{session_id}")).json()
            if body.get("status") == status:
                return body
            await asyncio.sleep(0.05)
    raise AssertionError(f"{session_id} never became {status}: {body}")
