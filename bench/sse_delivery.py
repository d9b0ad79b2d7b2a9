"""SSE delivery of one fast stream: chunks/s received and emit-to-client latency, 1 or N clients.

The server is `uvicorn app.main:app` in a subprocess (bench.agents:registry, a fresh store of
`--store`), so client and server CPU are not mixed. The run is bench.agents' `fanout`: a root
delegating at once to `--agents` local emitters that stream `--chunks` text deltas between them,
taking turns so that none is joined with its neighbour (the writer joins adjacent deltas of one
agent), as fast as they go or paced at `--rate` deltas/s. `--clients` SSE clients (httpx +
httpx-sse, one process) connect to `GET /stream/{id}` while the root waits `--delay` seconds
before delegating, then read to `event: end`.

Figures (one JSON line per run):
- `chunks_per_s`: chunks one client received per second, first to last chunk (median over the
  clients); `aggregate_chunks_per_s`: all clients' chunks over the span from the first chunk any
  client got to the last; `emitted_per_s`: the server's emission rate (chunk timestamps);
- `p50_ms`, `p99_ms`, `max_ms`: latency from each chunk's `timestamp` (ms since epoch, set when
  the runtime emitted it) to the moment a client parsed it, over every chunk of every client
  (timestamps are whole ms, so figures carry up to 1 ms of rounding);
- `server_cpu_us_per_chunk`: the server's CPU per chunk delivered (to one client), the figure
  least bent by a busy machine: 1e6 / it is the rate one free core could sustain;
- `server_cpu_s` / `server_runq_s` (CPU used, and time spent runnable but waiting for a CPU),
  the same for this client process, `loadavg` and `cpu_pressure_pct` (PSI some avg10): on a
  shared machine, cpu + runq near wall_s means the process was starved, not idle.
Every client must receive every sequence 1..N once, in order, and every delta unjoined.

    .venv/bin/python bench/sse_delivery.py --store memory                 # 1 client, max speed
    .venv/bin/python bench/sse_delivery.py --store postgres --rate 20000  # paced at the target
    .venv/bin/python bench/sse_delivery.py --store sqlite --clients 100 --chunks 1000
    .venv/bin/python bench/sse_delivery.py --all --rounds 3               # the table of medians

Targets: at least 20,000 chunks/s to one client, p99 under 50 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from httpx_sse import aconnect_sse

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.support import (
    Usage,
    noise,
    percentile,
    py_spy,
    run_rounds,
    server,
    temporary_store,
    versions,
)


@dataclass
class ClientRead:
    """What one SSE client got."""

    latencies_ms: array[float] = field(default_factory=lambda: array("d"))
    chunks: int = 0
    deltas: int = 0
    first_at: float = 0.0
    last_at: float = 0.0
    first_ts: int = 0
    last_ts: int = 0
    end: dict[str, Any] | None = None
    connected_at: float = 0.0


async def read(client: httpx.AsyncClient, stream_id: str, connected: asyncio.Event) -> ClientRead:
    """Read the stream to its end, timing every chunk; checks sequences are 1, 2, 3, ..."""
    got = ClientRead()
    loads = json.loads
    clock = time.time
    append = got.latencies_ms.append
    expected = 1
    async with aconnect_sse(client, "GET", f"/stream/{stream_id}") as source:
        source.response.raise_for_status()
        got.connected_at = clock()
        connected.set()
        async for event in source.aiter_sse():
            if not event.data:
                continue  # a heartbeat
            if event.event == "end":
                got.end = loads(event.data)
                break
            now = clock()
            chunk = loads(event.data)
            if chunk["sequence"] != expected or event.id != str(expected):
                raise AssertionError(f"expected sequence {expected}, got {event.id}")
            expected += 1
            timestamp = chunk["timestamp"]
            append(now * 1000 - timestamp)
            if chunk["type"] == "text_delta":
                got.deltas += 1
            if got.chunks == 0:
                got.first_at, got.first_ts = now, timestamp
            got.last_at, got.last_ts = now, timestamp
            got.chunks += 1
    return got


async def one_run(
    client: httpx.AsyncClient, clients: int, spec: dict[str, float], timeout: float
) -> tuple[list[ClientRead], float]:
    """Start one fanout run, read it with `clients` clients; their reads and when all were on."""
    response = await client.post(
        "/start", json={"agentType": "fanout", "message": json.dumps(spec)}
    )
    response.raise_for_status()
    stream_id = response.json()["streamId"]
    events = [asyncio.Event() for _ in range(clients)]
    async with asyncio.timeout(timeout):
        reads = await asyncio.gather(*(read(client, stream_id, ev) for ev in events))
    for got in reads:
        assert got.end == {"status": "completed"}, got.end
    return list(reads), max(got.connected_at for got in reads)


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    delay = args.delay if args.delay is not None else 0.3 + 0.01 * args.clients
    spec = {"chunks": args.chunks, "agents": args.agents, "rate": args.rate, "delay": delay}
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with (
        temporary_store(args.store) as url,
        server(url, loop=args.loop) as running,
        httpx.AsyncClient(base_url=running.url, timeout=30, limits=limits) as client,
    ):
        warm = {"chunks": 1000, "agents": args.agents, "rate": 0, "delay": 0.05}
        await one_run(client, min(args.clients, 10), warm, args.timeout)
        server_usage = running.usage()
        client_usage = Usage(os.getpid()).start()
        started = time.perf_counter()
        async with py_spy(running.pid, args.profile):
            reads, all_connected = await one_run(client, args.clients, spec, args.timeout)
        wall = time.perf_counter() - started
        server_usage.stop()
        client_usage.stop()
    expected_deltas = args.chunks // args.agents * args.agents
    for got in reads:
        assert got.deltas == expected_deltas, f"{got.deltas} deltas, {expected_deltas} emitted"
    chunks = reads[0].chunks
    first_emit_ms = min(got.first_ts for got in reads)
    rates = [(got.chunks - 1) / (got.last_at - got.first_at) for got in reads]
    span = max(got.last_at for got in reads) - min(got.first_at for got in reads)
    latencies = [value for got in reads for value in got.latencies_ms]
    emitted_s = (max(got.last_ts for got in reads) - first_emit_ms) / 1000
    return {
        "bench": "sse_delivery",
        "store": args.store,
        "clients": args.clients,
        "chunks": chunks,
        "rate": args.rate,
        "chunks_per_s": round(statistics.median(rates)),
        "aggregate_chunks_per_s": round(args.clients * (chunks - 1) / span),
        "emitted_per_s": round((chunks - 1) / emitted_s) if emitted_s > 0 else None,
        "p50_ms": round(percentile(latencies, 50), 2),
        "p99_ms": round(percentile(latencies, 99), 2),
        "max_ms": round(max(latencies), 2),
        "wall_s": round(wall, 3),
        "server_cpu_us_per_chunk": round(server_usage.cpu * 1e6 / (args.clients * chunks), 1),
        **server_usage.figures("server"),
        **client_usage.figures("client"),
        "late_connect_ms": round(max(0.0, all_connected * 1000 - first_emit_ms), 1),
        "loop": args.loop,
        **noise(),
        **versions(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--store", choices=["memory", "sqlite", "postgres"], default="memory")
    parser.add_argument("--clients", type=int, default=1)
    parser.add_argument("--chunks", type=int, default=20_000, help="text deltas in the stream")
    parser.add_argument("--agents", type=int, default=2, help="emitters taking turns (>= 2)")
    parser.add_argument("--rate", type=float, default=0.0, help="deltas/s; 0 = max speed")
    parser.add_argument("--delay", type=float, help="seconds before emission starts")
    parser.add_argument("--loop", choices=["auto", "asyncio", "uvloop"], default="auto")
    parser.add_argument("--timeout", type=float, default=180.0, help="bound on one run (s)")
    parser.add_argument("--profile", help="py-spy the server's timed run into this file")
    parser.add_argument("--all", action="store_true", help="every config, --rounds times")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--stores", default="memory,sqlite,postgres")
    parser.add_argument("--fanout-chunks", type=int, default=1_000, help="stream for 100 clients")
    args = parser.parse_args()
    if args.agents < 2:
        parser.error("--agents must be at least 2, or adjacent deltas are joined")
    if args.all:
        configs = []
        for store in args.stores.split(","):
            base = ["--store", store, "--loop", args.loop]
            configs += [
                (f"{store} 1 client max", [*base, "--chunks", str(args.chunks)]),
                (
                    f"{store} 1 client 20k/s",
                    [*base, "--chunks", str(args.chunks), "--rate", "20000"],
                ),
                (
                    f"{store} 100 clients max",
                    [*base, "--clients", "100", "--chunks", str(args.fanout_chunks)],
                ),
            ]
        keys = [
            "chunks_per_s",
            "aggregate_chunks_per_s",
            "emitted_per_s",
            "p50_ms",
            "p99_ms",
            "server_cpu_us_per_chunk",
            "server_runq_s",
            "client_cpu_s",
        ]
        run_rounds(__file__, configs, args.rounds, keys)
        return
    print(json.dumps(asyncio.run(measure(args))))


if __name__ == "__main__":
    main()
