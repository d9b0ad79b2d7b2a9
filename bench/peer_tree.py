"""The peer-bench tree on this runtime, so figures compare with ../shared/peer-bench/RESULTS.md.

One tree: the parent's first model call asks for 3 sub-agents at once; each child calls `add`,
then finishes through `__finish__`; the parent's second call answers with the children's results.
8 model calls, 3 delegations, 3 `add` calls; critical path 4 model calls. Prints one JSON line per
run in the peers' format (`--store` picks the store: memory, sqlite or postgres).

    python bench/peer_tree.py --scenario conc --trees 100 --latency-ms 50 --store memory
    python bench/peer_tree.py --all --rounds 5      # every scenario, medians
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
from pydantic import BaseModel

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app import AgentRegistry, AgentRuntime, create_sub_agent_tool, define_agent, define_tool
from app.agents import AgentHooks, ToolContext
from app.models import (
    Model,
    ModelEvent,
    ModelRequest,
    ModelResponse,
    TextDelta,
    ToolCall,
    ToolCallReady,
)
from app.protocol import ToolMessage
from app.serve import settle_collector
from app.store import StateStore, create_store

COUNTS: Counter[str] = Counter()
SPANS: list[tuple[float, float]] = []
EXPECTED = {"model_parent": 2, "model_child": 6, "tool_delegate": 3, "tool_add": 3}
SCENARIOS = {
    "seq200_L0": ("seq", 200, 0.0),
    "conc50_L0": ("conc", 50, 0.0),
    "conc100_L50": ("conc", 100, 50.0),
    "seq10_L50": ("seq", 10, 50.0),
}


class AddInput(BaseModel):
    a: int
    b: int


class Task(BaseModel):
    task: str
    a: int
    b: int


class ChildOutput(BaseModel):
    result: str


async def add(input: AddInput, ctx: ToolContext[object]) -> int:
    COUNTS["tool_add"] += 1
    return input.a + input.b


class PeerModel(Model):
    """The peers' fake model: decide the reply from the conversation, sleep the latency once,
    answer. (FunctionModel would spread the latency over word-sized deltas, a sleep each: more
    work than the peers' models do, so not the same workload.)"""

    def __init__(self, decide: Callable[[ModelRequest], ModelResponse], latency: float) -> None:
        self.decide = decide
        self.latency = latency

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        response = self.decide(request)
        if self.latency:
            await asyncio.sleep(self.latency)
        if response.text:
            yield TextDelta(response.text)
        for call in response.tool_calls:
            yield ToolCallReady(call)


def build_registry(latency: float) -> AgentRegistry:
    def child_model(request: ModelRequest) -> ModelResponse:
        COUNTS["model_child"] += 1
        last = request.messages[-1]
        if isinstance(last, ToolMessage):
            return ModelResponse(
                tool_calls=[ToolCall("__finish__", {"result": f"child result {last.result}"})]
            )
        task = json.loads(last.content)
        return ModelResponse(tool_calls=[ToolCall("add", {"a": task["a"], "b": task["b"]})])

    def parent_model(request: ModelRequest) -> ModelResponse:
        COUNTS["model_parent"] += 1
        results = [m.result for m in request.messages if isinstance(m, ToolMessage)]
        if results:
            texts = [r["result"] for r in results if isinstance(r, dict)]
            return ModelResponse(text="parent done: " + " | ".join(texts))
        return ModelResponse(
            tool_calls=[
                ToolCall("subagent__child", {"task": f"subtask {i}", "a": i, "b": 10})
                for i in range(3)
            ]
        )

    starts: dict[str, float] = {}

    def before(ctx: object, agent_type: str, sub_session_id: str, input: object) -> None:
        COUNTS["tool_delegate"] += 1
        starts[sub_session_id] = time.perf_counter()

    def after(ctx: object, agent_type: str, sub_session_id: str, result: object) -> None:
        SPANS.append((starts.pop(sub_session_id), time.perf_counter()))

    child = define_agent(
        "child",
        tools=[define_tool("add", description="Add two integers.", input_schema=AddInput)(add)],
        output_schema=ChildOutput,
        model=PeerModel(child_model, latency),
    )
    parent = define_agent(
        "parent",
        tools=[create_sub_agent_tool(child, Task, description="Delegate a subtask.")],
        model=PeerModel(parent_model, latency),
        hooks=AgentHooks(before_sub_agent=before, after_sub_agent=after),
    )
    return AgentRegistry([parent])


async def run_tree(runtime: AgentRuntime) -> None:
    handle = await runtime.execute("parent", "do the thing")
    result = await handle.result()
    expected = "parent done: child result 10 | child result 11 | child result 12"
    assert result.output == expected, result


def check_counts(before: Counter[str], trees: int) -> None:
    delta = {k: COUNTS[k] - before[k] for k in EXPECTED}
    assert delta == {k: v * trees for k, v in EXPECTED.items()}, delta


POSTGRES_ADMIN = os.environ.get(
    "BENCH_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"
)
"""Where benchmark databases are created: each PostgreSQL run gets a fresh one, then drops it."""


@contextlib.asynccontextmanager
async def store_url(kind: str, tmp: str) -> AsyncIterator[str]:
    """The store a run uses: empty, like the peers' truncated checkpoint tables."""
    if kind == "memory":
        yield "memory://"
    elif kind == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp}/bench.db"
    else:
        name = f"bench_{uuid.uuid4().hex[:12]}"
        admin = await asyncpg.connect(POSTGRES_ADMIN)
        await admin.execute(f'CREATE DATABASE "{name}"')
        try:
            base = POSTGRES_ADMIN.rsplit("/", 1)[0].replace(
                "postgresql://", "postgresql+asyncpg://"
            )
            yield f"{base}/{name}"
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            await admin.close()


async def measure(
    scenario: str, trees: int, latency_ms: float, store_kind: str, *, freeze: bool = True
) -> dict[str, object]:
    latency = latency_ms / 1000
    registry = build_registry(latency)
    with tempfile.TemporaryDirectory() as tmp:
        async with store_url(store_kind, tmp) as url:
            store: StateStore = create_store(url)
            async with (
                store,
                AgentRuntime(registry, store=store, takeover_interval=None) as runtime,
            ):
                if freeze:
                    # As the server does once it has started: what start-up made leaves the
                    # collector's full passes (each 60-75 ms over this process), and young
                    # objects are collected less often.
                    settle_collector()
                before = COUNTS.copy()
                await run_tree(runtime)
                check_counts(before, 1)
                assert max(s for s, _ in SPANS) < min(e for _, e in SPANS), "no overlap"
                await asyncio.gather(*(run_tree(runtime) for _ in range(5)))
                before = COUNTS.copy()
                cpu0 = time.process_time()
                t0 = time.perf_counter()
                if scenario == "seq":
                    for _ in range(trees):
                        await run_tree(runtime)
                else:
                    await asyncio.gather(*(run_tree(runtime) for _ in range(trees)))
                wall = time.perf_counter() - t0
                cpu = time.process_time() - cpu0
                check_counts(before, trees)
    calls = 8 * trees
    ideal = 4 * latency * (trees if scenario == "seq" else 1)
    return {
        "peer": "agent-server",
        "store": store_kind,
        "scenario": scenario,
        "trees": trees,
        "latency_ms": latency_ms,
        "wall_s": round(wall, 4),
        "trees_per_s": round(trees / wall, 2),
        "ms_per_model_call": round(wall * 1000 / calls, 3),
        "proc_cpu_ms_per_model_call": round(cpu * 1000 / calls, 3),
        "overhead_ratio": round(wall / ideal, 3) if ideal else None,
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "python": sys.version.split()[0],
        "loadavg": round(os.getloadavg()[0], 2),
    }


def run_all(rounds: int, stores: list[str]) -> None:
    """Every scenario x store, each a fresh process, `rounds` times; prints medians."""
    rows: dict[tuple[str, str], list[dict[str, float]]] = {}
    for _ in range(rounds):
        for name, (scenario, trees, latency) in SCENARIOS.items():
            for store in stores:
                out = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--scenario",
                        scenario,
                        "--trees",
                        str(trees),
                        "--latency-ms",
                        str(latency),
                        "--store",
                        store,
                    ],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
                rows.setdefault((name, store), []).append(json.loads(out.splitlines()[-1]))
    print("| scenario | store | trees/s | ms/model call | CPU ms/model call | overhead ratio |")
    print("|---|---|---:|---:|---:|---:|")
    keys = ("trees_per_s", "ms_per_model_call", "proc_cpu_ms_per_model_call", "overhead_ratio")
    for (name, store), runs in rows.items():
        cells = [_median(runs, key) for key in keys]
        print(f"| {name} | {store} | " + " | ".join(str(cell) for cell in cells) + " |")


def _median(runs: list[dict[str, float]], key: str) -> float | None:
    values = [run[key] for run in runs if run[key] is not None]
    return round(statistics.median(values), 3) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scenario", choices=["seq", "conc"], default="conc")
    parser.add_argument("--trees", type=int, default=50)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--store", choices=["memory", "sqlite", "postgres"], default="memory")
    parser.add_argument("--all", action="store_true", help="every scenario, medians of rounds")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--stores", default="memory")
    parser.add_argument(
        "--no-freeze",
        action="store_true",
        help="leave the collector as Python sets it (no freeze, default thresholds)",
    )
    args = parser.parse_args()
    if args.all:
        run_all(args.rounds, args.stores.split(","))
        return
    row = asyncio.run(
        measure(args.scenario, args.trees, args.latency_ms, args.store, freeze=not args.no_freeze)
    )
    row["gc_freeze"] = not args.no_freeze
    print(json.dumps(row))


if __name__ == "__main__":
    main()
