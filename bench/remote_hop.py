"""The cost of a remote hop: one child run locally vs on a second server over HTTP + SSE.

Two `uvicorn app.main:app` subprocesses, each on a fresh store of `--store`: the remote server
R, and the parent server P (bench.agents with `BENCH_REMOTE_URL` = R), whose agents delegate
the same child, `hop_child` (2 quick model steps: `add`, then finish), either in P
(`hop_local`, `create_sub_agent_tool`) or on R (`hop_remote`, `create_remote_sub_agent_tool`
over `HttpRemoteAgentTransport`). Models answer at once (latency 0).

1. Delegation: `--runs` parents of each kind one at a time (interleaved), each started with
   POST /start on P and read to its end by SSE. `*_delegation_ms`: from the parent's
   `subagent_start` to its `subagent_end` (chunk timestamps, whole ms, P's clock); `*_run_ms`:
   the client's POST-to-end time. `hop_cost_ms` = remote - local delegation (medians).
   Then `--concurrent` parents of each kind at once: `conc_*_delegation_ms` (median).
2. Proxied chunks: R's `fanout` streams `--chunks` deltas (2 emitters taking turns, as fast as
   they go). `direct_*`: one client reads it from R. `proxied_*`: P's `proxy` agent runs it as a
   remote sub-agent, copying each chunk into P's stream, and one client reads P's stream:
   chunks/s (first to last delta received) and latency from the delta's emission on R (its text
   carries the emit time in us) to the client, p50/p99. `copy_per_s`: the rate at which P
   re-emitted them (P's timestamps). Every delta must arrive once, in order, unjoined.

    .venv/bin/python bench/remote_hop.py --store sqlite
    .venv/bin/python bench/remote_hop.py --store postgres --runs 50 --chunks 20000
    .venv/bin/python bench/remote_hop.py --all --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from httpx_sse import aconnect_sse

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.support import (
    Server,
    http_client,
    noise,
    percentile,
    py_spy,
    run_rounds,
    server,
    temporary_store,
    versions,
)

OUTPUT = "done {'total': 5} None"


async def read(
    client: httpx.AsyncClient, stream_id: str
) -> tuple[list[tuple[float, dict[str, Any]]], Any]:
    """Every chunk with the time it was received, and the end event's data."""
    got: list[tuple[float, dict[str, Any]]] = []
    async with aconnect_sse(client, "GET", f"/stream/{stream_id}") as source:
        source.response.raise_for_status()
        async for event in source.aiter_sse():
            if not event.data:
                continue
            if event.event == "end":
                return got, json.loads(event.data)
            got.append((time.time(), json.loads(event.data)))
    raise AssertionError("the stream closed before its end event")


async def start(client: httpx.AsyncClient, agent: str, message: str) -> str:
    response = await client.post("/start", json={"agentType": agent, "message": message})
    response.raise_for_status()
    stream_id: str = response.json()["streamId"]
    return stream_id


async def delegation(url: str, agent: str) -> tuple[float, float]:
    """One parent run of `agent` on P: its delegation (ms) and the client's run time (ms)."""
    started = time.perf_counter()
    async with http_client(url) as client:
        stream_id = await start(client, agent, "go")
        chunks, end = await read(client, stream_id)
    run_ms = (time.perf_counter() - started) * 1000
    assert end == {"status": "completed"}, end
    by_type = {c["type"]: c for _, c in chunks if c["agentId"] == stream_id}
    assert by_type["output"]["output"] == OUTPUT, by_type["output"]
    delegated = by_type["subagent_end"]["timestamp"] - by_type["subagent_start"]["timestamp"]
    return float(delegated), run_ms


async def delegations(url: str, runs: int, concurrent: int) -> dict[str, float]:
    for agent in ("hop_local", "hop_remote") * 3:
        await delegation(url, agent)
    timings: dict[str, list[tuple[float, float]]] = {"hop_local": [], "hop_remote": []}
    for index in range(runs):
        order = ("hop_local", "hop_remote") if index % 2 == 0 else ("hop_remote", "hop_local")
        for agent in order:
            timings[agent].append(await delegation(url, agent))
    figures: dict[str, float] = {}
    for agent, kind in (("hop_local", "local"), ("hop_remote", "remote")):
        figures[f"{kind}_delegation_ms"] = statistics.median(d for d, _ in timings[agent])
        figures[f"{kind}_run_ms"] = round(statistics.median(r for _, r in timings[agent]), 2)
    figures["hop_cost_ms"] = figures["remote_delegation_ms"] - figures["local_delegation_ms"]
    if concurrent:
        for agent, kind in (("hop_local", "local"), ("hop_remote", "remote")):
            started = time.perf_counter()
            done = await asyncio.gather(*(delegation(url, agent) for _ in range(concurrent)))
            figures[f"conc_{kind}_wall_s"] = round(time.perf_counter() - started, 3)
            figures[f"conc_{kind}_delegation_ms"] = statistics.median(d for d, _ in done)
    return figures


def emitted_us(chunk: dict[str, Any]) -> int:
    """The emit time an emitter wrote into its delta: `"<n>@<us since epoch> "`."""
    return int(chunk["delta"].strip().partition("@")[2])


def deltas_of(
    chunks: list[tuple[float, dict[str, Any]]], expected: int
) -> list[tuple[float, dict[str, Any]]]:
    sequences = [c["sequence"] for _, c in chunks]
    assert sequences == list(range(sequences[0], sequences[0] + len(sequences))), "gap"
    deltas = [(at, c) for at, c in chunks if c["type"] == "text_delta" and "@" in c["delta"]]
    assert len(deltas) == expected, f"{len(deltas)} deltas arrived, {expected} were emitted"
    return deltas


def stream_figures(prefix: str, deltas: list[tuple[float, dict[str, Any]]]) -> dict[str, float]:
    latencies = [at * 1000 - emitted_us(c) / 1000 for at, c in deltas]
    span = deltas[-1][0] - deltas[0][0]
    return {
        f"{prefix}_chunks_per_s": round((len(deltas) - 1) / span),
        f"{prefix}_p50_ms": round(percentile(latencies, 50), 2),
        f"{prefix}_p99_ms": round(percentile(latencies, 99), 2),
    }


async def proxied(
    remote: Server, parent: Server, chunks: int, profile: str | None
) -> dict[str, Any]:
    spec = json.dumps({"chunks": chunks, "agents": 2, "rate": 0, "delay": 0.3})
    async with http_client(remote.url) as client:
        got, end = await read(client, await start(client, "fanout", spec))
        assert end == {"status": "completed"}, end
    figures = stream_figures("direct", deltas_of(got, chunks))
    usages = {"remote": remote.usage(), "parent": parent.usage()}
    async with http_client(parent.url) as client, py_spy(parent.pid, profile):
        got, end = await read(client, await start(client, "proxy", spec))
        assert end == {"status": "completed"}, end
    for usage in usages.values():
        usage.stop()
    deltas = deltas_of(got, chunks)
    figures.update(stream_figures("proxied", deltas))
    copied = [c["timestamp"] for _, c in deltas]
    figures["copy_per_s"] = round((len(copied) - 1) / max((copied[-1] - copied[0]) / 1000, 1e-3))
    for name, usage in usages.items():
        figures.update(usage.figures(f"proxied_{name}"))
    return figures


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    async with (
        temporary_store(args.store) as remote_url,
        temporary_store(args.store) as parent_url,
        server(remote_url, loop=args.loop) as remote,
        server(parent_url, loop=args.loop, env={"BENCH_REMOTE_URL": remote.url}) as parent,
    ):
        async with asyncio.timeout(args.timeout):
            figures = await delegations(parent.url, args.runs, args.concurrent)
            figures.update(await proxied(remote, parent, args.chunks, args.profile))
    return {
        "bench": "remote_hop",
        "store": args.store,
        "runs": args.runs,
        "concurrent": args.concurrent,
        "chunks": args.chunks,
        **figures,
        "loop": args.loop,
        **noise(),
        **versions(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--store", choices=["memory", "sqlite", "postgres"], default="sqlite")
    parser.add_argument("--runs", type=int, default=30, help="sequential parents of each kind")
    parser.add_argument("--concurrent", type=int, default=50, help="parents of each kind at once")
    parser.add_argument("--chunks", type=int, default=10_000, help="deltas in the proxied stream")
    parser.add_argument("--loop", choices=["auto", "asyncio", "uvloop"], default="auto")
    parser.add_argument("--timeout", type=float, default=300.0, help="bound on the run (s)")
    parser.add_argument("--profile", help="py-spy the parent server's proxied run into this file")
    parser.add_argument("--all", action="store_true", help="every store, --rounds times")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--stores", default="sqlite,postgres")
    args = parser.parse_args()
    if args.all:
        configs = [
            (store, ["--store", store, "--runs", str(args.runs), "--chunks", str(args.chunks)])
            for store in args.stores.split(",")
        ]
        keys = [
            "local_delegation_ms",
            "remote_delegation_ms",
            "hop_cost_ms",
            "conc_local_delegation_ms",
            "conc_remote_delegation_ms",
            "direct_chunks_per_s",
            "proxied_chunks_per_s",
            "proxied_p99_ms",
        ]
        run_rounds(__file__, configs, args.rounds, keys)
        return
    print(json.dumps(asyncio.run(measure(args))))


if __name__ == "__main__":
    main()
