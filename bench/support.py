"""Shared plumbing of the HTTP benchmarks: throwaway databases, server subprocesses, figures.

Not a benchmark itself. `temporary_store(kind)` yields a store URL (memory, a SQLite file in a
temporary folder, or a PostgreSQL database created for the run and dropped after it);
`server(...)` runs `uvicorn app.main:app` (or, given `workers`, the server command
`python -m app.serve --workers N`) serving `bench.agents:registry` in a subprocess on a free
loopback port and stops it (SIGTERM, then SIGKILL) whatever happens; a server's CPU figures
count its worker processes too. `otlp_sink()` answers OTLP/HTTP exports on loopback, for
measuring a server with tracing on. `run_rounds` reruns a script as fresh processes and prints
medians with min..max.

PostgreSQL: the server of `BENCH_POSTGRES_URL` (default
`postgresql+asyncpg://postgres@127.0.0.1:5432/postgres`), where each run creates and drops a
database named `bench_<random>`.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import os
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import httpx
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parent.parent
AGENT_MODULE = "bench.agents:registry"
POSTGRES_URL = os.environ.get(
    "BENCH_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres"
)
SETTINGS_ENV = {
    "DATABASE_URL",
    "AGENT_MODULE",
    "API_KEY",
    "SERVER_ID",
    "LEASE_SECONDS",
    "TAKEOVER_INTERVAL",
    "STREAM_HEARTBEAT",
    "STREAM_POLL",
    "FLUSH_DELAY",
    "MAX_BODY_BYTES",
    "CHUNK_RETENTION_HOURS",
    "RETENTION_INTERVAL",
    "LOG_FORMAT",
    "LOG_LEVEL",
    "SHUTDOWN_TIMEOUT",
    "WEB_CONCURRENCY",
    "PROMETHEUS_MULTIPROC_DIR",
}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_SSL = ssl.create_default_context()


def http_client(url: str, *, timeout: float = 60.0) -> httpx.AsyncClient:
    """A client of its own for one simulated user, cheap to make (the SSL context is shared).

    Why not one client for everyone: httpcore's connection pool rescans every connection for
    every queued request (`_assign_requests_to_connections`), so one `AsyncClient` carrying 100+
    concurrent requests spends most of its CPU there (profiled: 1M `is_idle` calls for 200
    requests) and becomes the bottleneck of the benchmark.
    """
    return httpx.AsyncClient(base_url=url, timeout=timeout, verify=_SSL)


def _dsn(url: str, database: str | None = None) -> str:
    parsed = make_url(url).set(drivername="postgresql")
    if database is not None:
        parsed = parsed.set(database=database)
    return parsed.render_as_string(hide_password=False)


@contextlib.asynccontextmanager
async def temporary_store(kind: str) -> AsyncIterator[str]:
    """The URL of a fresh, empty store of `kind` (memory, sqlite or postgres), removed after."""
    if kind == "memory":
        yield "memory://"
        return
    if kind == "sqlite":
        with tempfile.TemporaryDirectory(prefix="bench-") as folder:
            yield f"sqlite+aiosqlite:///{folder}/bench.db"
        return
    if kind != "postgres":
        raise ValueError(f"unknown store {kind!r}")
    name = f"bench_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(_dsn(POSTGRES_URL), timeout=10)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants (a server's worker processes), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                ppid = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo += children.get(current, [])
    return tree


def process_cpu(pid: int, *, tree: bool = False) -> float:
    """CPU seconds (user + system) the process `pid` (with `tree`, and its live descendants)
    has used so far (Linux /proc)."""
    total = 0
    for member in process_tree(pid) if tree else [pid]:
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{member}/stat").read_text().rpartition(")")[2].split()
            total += int(fields[11]) + int(fields[12])
    return total / CLOCK_TICKS


def runqueue_wait(pid: int, *, tree: bool = False) -> float:
    """Seconds the threads of `pid` (with `tree`, and its descendants') have spent runnable but
    waiting for a CPU (schedstat): a server that is busy or waiting for a CPU all the time was
    CPU-bound, on a shared machine possibly by others' load."""
    total = 0
    for member in process_tree(pid) if tree else [pid]:
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{member}/task").iterdir():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    total += int((task / "schedstat").read_text().split()[1])
    return total / 1e9


def cpu_pressure() -> float | None:
    """The share of the last 10 s in which some runnable task waited for a CPU (PSI), in %."""
    try:
        line = Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    return float(line.split()[1].partition("=")[2])


@dataclass
class Usage:
    """CPU used and run-queue wait of a process, between two snapshots."""

    pid: int
    cpu: float = 0.0
    wait: float = 0.0
    tree: bool = False
    """Whether the process's descendants count too (a server's workers)."""

    def start(self) -> Usage:
        self.cpu = -process_cpu(self.pid, tree=self.tree)
        self.wait = -runqueue_wait(self.pid, tree=self.tree)
        return self

    def stop(self) -> Usage:
        self.cpu += process_cpu(self.pid, tree=self.tree)
        self.wait += runqueue_wait(self.pid, tree=self.tree)
        return self

    def figures(self, prefix: str) -> dict[str, float]:
        return {f"{prefix}_cpu_s": round(self.cpu, 2), f"{prefix}_runq_s": round(self.wait, 2)}


def machine_busy() -> float:
    """CPU seconds every core of the machine has been busy so far (/proc/stat: all but idle
    and iowait), whoever used them: with the wall time, how saturated the machine was."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / CLOCK_TICKS


def noise() -> dict[str, float | None]:
    """The machine's load now: 1-minute load average and CPU pressure."""
    return {"loadavg": round(os.getloadavg()[0], 2), "cpu_pressure_pct": cpu_pressure()}


@dataclass
class Server:
    """A running server subprocess."""

    url: str
    process: asyncio.subprocess.Process
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def usage(self) -> Usage:
        """Start measuring the server's CPU and run-queue wait, its workers' included (`.stop()`
        ends it)."""
        return Usage(self.pid, tree=True).start()

    def log(self, lines: int = 30) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


@contextlib.asynccontextmanager
async def server(
    database_url: str,
    *,
    loop: str = "auto",
    env: dict[str, str] | None = None,
    start_timeout: float = 30.0,
    workers: int | None = None,
) -> AsyncIterator[Server]:
    """`uvicorn app.main:app` on a free loopback port with AGENT_MODULE=bench.agents:registry,
    ready (answering /readyz) when yielded; stopped and reaped when the block ends. With
    `workers`, the server command (`python -m app.serve`) with that many worker processes."""
    environment = {
        k: v for k, v in os.environ.items() if k not in SETTINGS_ENV and not k.startswith("OTEL_")
    }
    environment.update(
        DATABASE_URL=database_url, AGENT_MODULE=AGENT_MODULE, PYTHONUNBUFFERED="1", **(env or {})
    )
    with tempfile.TemporaryDirectory(prefix="bench-server-") as folder:
        log_path = Path(folder) / "server.log"
        port = free_port()
        command = [
            sys.executable,
            "-m",
            "uvicorn",
            "app.main:app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--loop",
            loop,
            "--log-level",
            "warning",
            "--no-access-log",
            "--timeout-graceful-shutdown",
            "2",
        ]
        if workers is not None:
            environment.setdefault("SHUTDOWN_TIMEOUT", "2")
            command = [
                sys.executable,
                "-m",
                "app.serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                str(workers),
                "--no-access-log",
            ]
        with log_path.open("wb") as log:
            process = await asyncio.create_subprocess_exec(
                *command,
                cwd=ROOT,
                env=environment,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        running = Server(f"http://127.0.0.1:{port}", process, log_path)
        try:
            await _wait_ready(running, start_timeout)
            yield running
        finally:
            await _stop(process)


async def _wait_ready(running: Server, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(base_url=running.url, timeout=2) as client:
        while time.monotonic() < deadline:
            if running.process.returncode is not None:
                raise RuntimeError(f"the server exited at start:\n{running.log()}")
            with contextlib.suppress(httpx.TransportError):
                if (await client.get("/readyz")).status_code == 200:
                    return
            await asyncio.sleep(0.05)
    raise RuntimeError(f"the server was not ready after {timeout}s:\n{running.log()}")


async def _stop(process: asyncio.subprocess.Process) -> None:
    """SIGTERM (uvicorn shuts down gracefully), then SIGKILL after 8 s."""
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), 8)
        except TimeoutError:
            process.kill()
            await asyncio.wait_for(process.wait(), 10)


@contextlib.contextmanager
def otlp_sink() -> Iterator[OtlpSink]:
    """An OTLP/HTTP endpoint on loopback that accepts every export (an empty protobuf answer is
    a valid one) and counts requests and bytes, in a thread of this process."""
    sink = OtlpSink()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", 0))
            self.rfile.read(length)
            sink.requests += 1
            sink.bytes += length
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    listener = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    sink.url = f"http://127.0.0.1:{listener.server_address[1]}"
    thread = threading.Thread(target=listener.serve_forever, daemon=True)
    thread.start()
    try:
        yield sink
    finally:
        listener.shutdown()
        listener.server_close()


@dataclass
class OtlpSink:
    """Where an OTLP exporter sends, and what it sent."""

    url: str = ""
    requests: int = 0
    bytes: int = 0


@contextlib.asynccontextmanager
async def py_spy(pid: int, output: str | None) -> AsyncIterator[None]:
    """Sample `pid` with py-spy (the `PY_SPY` binary, else `py-spy` on PATH) while the block
    runs, writing collapsed stacks to `output` (`--format raw`); nothing when `output` is None."""
    if output is None:
        yield
        return
    binary = os.environ.get("PY_SPY") or shutil.which("py-spy")
    if binary is None:
        raise RuntimeError("--profile needs py-spy: set PY_SPY or put it on PATH")
    process = await asyncio.create_subprocess_exec(
        binary,
        "record",
        "--pid",
        str(pid),
        "--rate",
        "250",
        "--format",
        "raw",
        "--nonblocking",
        "--output",
        output,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    await asyncio.sleep(0.5)  # attached
    try:
        yield
    finally:
        process.send_signal(signal.SIGINT)
        try:
            await asyncio.wait_for(process.wait(), 20)
        except TimeoutError:
            process.kill()
            await process.wait()


def top_frames(path: str, count: int = 25) -> list[tuple[str, float]]:
    """From py-spy's raw (collapsed) output: the functions with the most samples on the stack
    (inclusive), as (function, share of samples)."""
    totals: dict[str, int] = {}
    samples = 0
    for line in Path(path).read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not count_text.isdigit():
            continue
        samples += int(count_text)
        for frame in set(stack.split(";")):
            totals[frame] = totals.get(frame, 0) + int(count_text)
    ranked = sorted(totals.items(), key=lambda item: -item[1])[:count]
    return [(frame, round(n / max(samples, 1), 3)) for frame, n in ranked]


def percentile(values: Sequence[float], q: float) -> float:
    """The `q`-th percentile (0..100) of `values`, nearest rank."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def loadavg() -> float:
    """The 1-minute load average now."""
    return round(os.getloadavg()[0], 2)


def versions() -> dict[str, str]:
    """Versions that matter to the figures."""
    import fastapi
    import sse_starlette
    import uvicorn

    return {
        "app": app_revision(),
        "python": sys.version.split()[0],
        "uvicorn": uvicorn.__version__,
        "fastapi": fastapi.__version__,
        "sse_starlette": sse_starlette.__version__,
    }


def app_revision() -> str:
    """The commit of the app under test: `ROOT/COMMIT` in a snapshot made with `git archive`,
    else `git rev-parse HEAD`, marked `+dirty` when app/ has uncommitted changes (other people
    edit it: for stable figures, run from a snapshot, see bench/HTTP.md)."""
    marker = ROOT / "COMMIT"
    if marker.exists():
        return marker.read_text().strip()
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "app"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return "unknown"
    return f"{head}+dirty" if dirty else head


def run_rounds(
    script: str,
    configs: Sequence[tuple[str, list[str]]],
    rounds: int,
    keys: Sequence[str],
    *,
    timeout: float = 600.0,
) -> None:
    """Run `script` once per config per round, each a fresh process (configs interleaved, order
    rotated every round), echo each JSON line to stderr, then print a markdown table: the median
    of each key with min..max, and the load averages seen."""
    commands = [(label, [sys.executable, script, *argv]) for label, argv in configs]
    run_command_rounds(commands, rounds, keys, timeout=timeout)


def run_command_rounds(
    configs: Sequence[tuple[str, list[str]]],
    rounds: int,
    keys: Sequence[str],
    *,
    timeout: float = 600.0,
) -> None:
    """`run_rounds` for whole commands (scripts of different snapshots, say): each prints one
    JSON line last."""
    rows: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in configs}
    for round_index in range(rounds):
        shift = round_index % len(configs)
        for label, argv in [*configs[shift:], *configs[:shift]]:
            result = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
            if result.returncode != 0:
                print(f"{label}: FAILED\n{result.stderr[-3000:]}", file=sys.stderr)
                continue
            row = json.loads(result.stdout.strip().splitlines()[-1])
            rows[label].append(row)
            print(json.dumps({"config": label, **row}), file=sys.stderr, flush=True)
    print("| config | runs | " + " | ".join(keys) + " | load avg |")
    print("|---|---:|" + "---:|" * len(keys) + "---|")
    for label, runs in rows.items():
        cells = [summary([run.get(key) for run in runs]) for key in keys]
        loads = [run["loadavg"] for run in runs if "loadavg" in run]
        load = f"{min(loads)}..{max(loads)}" if loads else "-"
        print(f"| {label} | {len(runs)} | " + " | ".join(cells) + f" | {load} |")


def summary(values: Sequence[Any]) -> str:
    """`median (min..max)` of the numbers among `values`."""
    numbers = [v for v in values if isinstance(v, int | float)]
    if not numbers:
        return "-"
    return f"{_fmt(statistics.median(numbers))} ({_fmt(min(numbers))}..{_fmt(max(numbers))})"


def _fmt(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"
