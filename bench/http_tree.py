"""The peer-bench tree over HTTP: trees started with POST /start and read to `event: end` by SSE.

Same tree as bench/peer_tree.py and ../shared/peer-bench (parent + 3 parallel children, 8 model
calls, 3 delegations, 3 `add` calls, critical path 4 model calls), served by `uvicorn
app.main:app` in a subprocess (bench.agents:registry, model latency `--latency-ms`, a fresh
store of `--store`). The client (httpx + httpx-sse, this process) runs each tree with an
`AsyncClient` of its own, as a user would, POST /start then GET /stream/{id} to its end (one
shared client would measure httpcore's pool, see `bench.support.http_client`); `conc` runs
`--trees` trees at once, `seq` one after another.

`--workers N` serves with the server command's N worker processes (`python -m app.serve`;
the server's CPU figures are then every worker's); the calls are then checked from `/metrics`
(every worker's), not from the `counters` agent (one worker's). `--tracing` turns OpenTelemetry
on in the server, exporting over OTLP/HTTP to a sink in this process (its CPU is the client's);
`--log-level` sets the server's LOG_LEVEL (default INFO: a line per run start and end).

Before timing: one tree, checked from its stream (3 subagent_start before any subagent_end,
`add` results 10, 11, 12, the parent's output naming all 3 results) and from the server's call
counters (the `counters` agent: exactly 2 parent + 6 child model calls, 3 delegations, 3 adds);
then 5 warm-up trees. After: the counters moved by exactly `trees` x those numbers.

Figures (one JSON line per run, the peers' keys where they exist): wall_s, trees_per_s,
overhead_ratio = wall / ideal (ideal 4 x latency, x trees when sequential), tree_p50_ms /
tree_p99_ms (POST to end, per tree), server_cpu_ms_per_model_call (the server process only;
PostgreSQL's own CPU is not in it), cpu_floor_ratio = server_cpu_s / ideal (the ratio the
server's CPU alone would allow on one free core), server_cpu_s / server_runq_s (CPU used, and
time spent runnable but waiting for a CPU: their sum near wall_s means the server was
CPU-bound, by its own work or by the machine's other load), the same for this client process,
loadavg and cpu_pressure_pct (PSI "some" avg10).

    .venv/bin/python bench/http_tree.py --store postgres                 # 100 trees, L = 50 ms
    .venv/bin/python bench/http_tree.py --store sqlite --scenario seq --trees 10
    .venv/bin/python bench/http_tree.py --all --rounds 3                 # medians per store
    .venv/bin/python bench/http_tree.py --store postgres --workers 2     # two worker processes
    .venv/bin/python bench/http_tree.py --store postgres --tracing       # spans exported

Target: overhead ratio 2.0 or less on PostgreSQL at 100 concurrent trees, L = 50 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from httpx_sse import aconnect_sse

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.lean_client import LeanClient
from bench.support import (
    OtlpSink,
    Usage,
    http_client,
    machine_busy,
    noise,
    otlp_sink,
    percentile,
    py_spy,
    run_rounds,
    server,
    temporary_store,
    versions,
)

EXPECTED = {"model_parent": 2, "model_child": 6, "tool_delegate": 3, "tool_add": 3}
OUTPUT = "parent done: child result 10 | child result 11 | child result 12"


async def stream(client: httpx.AsyncClient, stream_id: str) -> tuple[list[dict[str, Any]], Any]:
    """Every chunk of the stream (parsed) and the end event's data."""
    chunks: list[dict[str, Any]] = []
    async with aconnect_sse(client, "GET", f"/stream/{stream_id}") as source:
        source.response.raise_for_status()
        async for event in source.aiter_sse():
            if not event.data:
                continue
            if event.event == "end":
                return chunks, json.loads(event.data)
            chunks.append(json.loads(event.data))
    raise AssertionError("the stream closed before its end event")


async def start(client: httpx.AsyncClient, agent: str, message: str) -> str:
    response = await client.post("/start", json={"agentType": agent, "message": message})
    response.raise_for_status()
    stream_id: str = response.json()["streamId"]
    return stream_id


async def tree(url: str) -> tuple[float, list[dict[str, Any]]]:
    """One tree, by a client of its own (as one user would): start it, read it to its end; its
    duration (connecting included) and its chunks."""
    started = time.perf_counter()
    async with http_client(url) as client:
        stream_id = await start(client, "parent", "do the thing")
        chunks, end = await stream(client, stream_id)
    elapsed = time.perf_counter() - started
    assert end == {"status": "completed"}, end
    outputs = [c["output"] for c in chunks if c["type"] == "output" and c["agentId"] == stream_id]
    assert outputs == [OUTPUT], outputs
    return elapsed, chunks


def check_tree(chunks: list[dict[str, Any]]) -> None:
    """The tree's shape, from its stream: 3 children ran in parallel, each called `add`."""
    kinds = [c["type"] for c in chunks]
    starts = [i for i, kind in enumerate(kinds) if kind == "subagent_start"]
    ends = [i for i, kind in enumerate(kinds) if kind == "subagent_end"]
    assert (len(starts), len(ends)) == (3, 3), kinds
    assert max(starts) < min(ends), "the 3 delegations did not overlap"
    adds = sorted(c["result"] for c in chunks if c["type"] == "tool_end" and c["toolName"] == "add")
    assert adds == [10, 11, 12], adds


START = json.dumps({"agentType": "parent", "message": "do the thing"}).encode()


async def lean_tree(url: str) -> tuple[float, list[dict[str, Any]]]:
    """`tree` through `LeanClient`: the same requests, and the same checks of the end and the
    root's output, with only the output chunks parsed (ids are checked to be contiguous)."""
    started = time.perf_counter()
    outputs: list[str] = []
    async with await LeanClient.connect(url) as client:
        status, body = await client.post_json("/start", START)
        assert status == 201, (status, body)
        stream_id = json.loads(body)["streamId"]
        last = 0
        async for event in client.events(f"/stream/{stream_id}"):
            if event.event == "end":
                assert json.loads(event.data) == {"status": "completed"}, event
                break
            last += 1
            assert event.id == str(last), (event.id, last)
            if '"type":"output"' in event.data:
                chunk = json.loads(event.data)
                if chunk["agentId"] == stream_id:
                    outputs.append(chunk["output"])
        else:
            raise AssertionError("the stream closed before its end event")
    elapsed = time.perf_counter() - started
    assert outputs == [OUTPUT], outputs
    return elapsed, []


async def counters(client: httpx.AsyncClient) -> dict[str, int]:
    """The server's call counters (the `counters` agent answers with them)."""
    chunks, _ = await stream(client, await start(client, "counters", "count"))
    output = next(c["output"] for c in chunks if c["type"] == "output")
    counts: dict[str, int] = json.loads(output)
    return counts


def moved(before: dict[str, int], after: dict[str, int], trees: int) -> None:
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in EXPECTED}
    assert delta == {k: v * trees for k, v in EXPECTED.items()}, delta


METRICS = {
    "model_parent": ("agent_model_calls_total", {"agent_type": "parent"}),
    "model_child": ("agent_model_calls_total", {"agent_type": "child"}),
    "tool_delegate": ("agent_delegations_total", {"agent_type": "child"}),
    "tool_add": ("agent_tool_calls_total", {"tool": "add"}),
}


async def scraped(client: httpx.AsyncClient) -> dict[str, int]:
    """The same counts as `counters`, from `/metrics`: every worker's calls."""
    from prometheus_client.parser import text_string_to_metric_families

    text = (await client.get("/metrics")).text
    counts = dict.fromkeys(METRICS, 0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            for key, (name, labels) in METRICS.items():
                if sample.name == name and labels.items() <= sample.labels.items():
                    counts[key] += int(sample.value)
    return counts


async def measure(args: argparse.Namespace, sink: OtlpSink | None) -> dict[str, Any]:
    latency = args.latency_ms / 1000
    env = {"BENCH_LATENCY_MS": str(args.latency_ms)}
    if args.log_level:
        env["LOG_LEVEL"] = args.log_level
    if sink is not None:
        env.update(OTEL_EXPORTER_OTLP_ENDPOINT=sink.url, OTEL_SERVICE_NAME="bench")
        if args.trace_ratio is not None:
            env.update(
                OTEL_TRACES_SAMPLER="parentbased_traceidratio",
                OTEL_TRACES_SAMPLER_ARG=str(args.trace_ratio),
            )
    timed = lean_tree if args.client == "lean" else tree
    count = counters if args.workers is None else scraped
    async with (
        temporary_store(args.store) as url,
        server(url, loop=args.loop, env=env, workers=args.workers) as running,
        http_client(running.url) as client,
    ):
        before = await count(client)
        _, chunks = await tree(running.url)
        check_tree(chunks)
        moved(before, await count(client), 1)
        await asyncio.gather(*(timed(running.url) for _ in range(5 * (args.workers or 1))))
        before = await count(client)
        server_usage = running.usage()
        client_usage = Usage(os.getpid()).start()
        machine = -machine_busy()
        started = time.perf_counter()
        async with py_spy(running.pid, args.profile), asyncio.timeout(args.timeout):
            if args.scenario == "seq":
                durations = [(await timed(running.url))[0] for _ in range(args.trees)]
            else:
                runs = await asyncio.gather(*(timed(running.url) for _ in range(args.trees)))
                durations = [elapsed for elapsed, _ in runs]
        wall = time.perf_counter() - started
        server_usage.stop()
        client_usage.stop()
        machine += machine_busy()
        moved(before, await count(client), args.trees)
    calls = 8 * args.trees
    ideal = 4 * latency * (args.trees if args.scenario == "seq" else 1)
    return {
        "bench": "http_tree",
        "store": args.store,
        "scenario": args.scenario,
        "trees": args.trees,
        "latency_ms": args.latency_ms,
        "wall_s": round(wall, 4),
        "trees_per_s": round(args.trees / wall, 2),
        "overhead_ratio": round(wall / ideal, 3) if ideal else None,
        "tree_p50_ms": round(percentile(durations, 50) * 1000, 1),
        "tree_p99_ms": round(percentile(durations, 99) * 1000, 1),
        "ms_per_model_call": round(wall * 1000 / calls, 3),
        "server_cpu_ms_per_model_call": round(server_usage.cpu * 1000 / calls, 3),
        "cpu_floor_ratio": round(server_usage.cpu / ideal, 2) if ideal else None,
        **server_usage.figures("server"),
        "machine_cores_busy": round(machine / wall, 2),
        **client_usage.figures("client"),
        "loop": args.loop,
        "client": args.client,
        "workers": args.workers,
        "tracing": sink is not None,
        "trace_ratio": args.trace_ratio if sink is not None else None,
        "otlp_requests": sink.requests if sink is not None else None,
        "log_level": args.log_level or "INFO",
        **noise(),
        **versions(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--store", choices=["memory", "sqlite", "postgres"], default="postgres")
    parser.add_argument("--scenario", choices=["conc", "seq"], default="conc")
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--loop", choices=["auto", "asyncio", "uvloop"], default="auto")
    parser.add_argument(
        "--client",
        choices=["lean", "httpx"],
        default="lean",
        help="the timed trees' client (bench/lean_client.py, or httpx + httpx-sse as a user's)",
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="bound on the timed run (s)")
    parser.add_argument("--profile", help="py-spy the server's timed run into this file")
    parser.add_argument("--workers", type=int, help="serve with N worker processes")
    parser.add_argument("--tracing", action="store_true", help="OpenTelemetry on (OTLP sink)")
    parser.add_argument("--trace-ratio", type=float, help="with --tracing: sample this share")
    parser.add_argument("--log-level", help="the server's LOG_LEVEL (default INFO)")
    parser.add_argument("--all", action="store_true", help="every store, --rounds times")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--stores", default="sqlite,postgres")
    args = parser.parse_args()
    if args.all:
        configs = [
            (
                f"{store} {args.scenario}{args.trees} L{args.latency_ms:g}",
                [
                    "--store",
                    store,
                    "--scenario",
                    args.scenario,
                    "--trees",
                    str(args.trees),
                    "--latency-ms",
                    str(args.latency_ms),
                    "--loop",
                    args.loop,
                    "--client",
                    args.client,
                ],
            )
            for store in args.stores.split(",")
        ]
        keys = [
            "overhead_ratio",
            "wall_s",
            "trees_per_s",
            "tree_p50_ms",
            "tree_p99_ms",
            "server_cpu_ms_per_model_call",
            "cpu_floor_ratio",
            "server_runq_s",
            "client_cpu_s",
        ]
        run_rounds(__file__, configs, args.rounds, keys)
        return
    if args.tracing:
        with otlp_sink() as sink:
            print(json.dumps(asyncio.run(measure(args, sink))))
    else:
        print(json.dumps(asyncio.run(measure(args, None))))


if __name__ == "__main__":
    main()
