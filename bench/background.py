"""Background delegation: how fast the scheduler hands a freed slot on, and how many background
children per second go through a cap.

Agents: a `lead` with `delegation=Delegation([worker])` whose first response is `--children`
`subagent` calls with `background: true` (one response), whose second answers at once (its turn
ends; the children run on in the tree); a `worker` that makes one model call: it sleeps the
task's latency once, then answers in the summary envelope. In process (`AgentRuntime`, no HTTP),
over a fresh store of `--store` (bench/support.py `temporary_store`).

The runtime is instrumented from outside (the class methods wrapped, nothing changed): when each
child's end has landed in the store (`Lane.ended`'s future done: its queue row is gone, its
slot free), when a claim granted it its slot (`Scheduler.claim` returned), when its `Lane.begin`
returned (its `running` status stored) and when its model call started and returned.

- `handoff`: cap 1 (`--cap`), one lead, `--children` children each sleeping `--latency-ms`, so
  every child but the first waits for the previous one's slot. Per hand-off (child i's end
  landed -> child i+1, in the order they ran): `claim` to the grant, `begin` to its
  `Lane.begin` returning, `start` to its model call (the headline); `gap`, from child i's
  model answer to child i+1's model call, and `end`, from child i's answer to its end landed
  (its end's write: the part of `gap` before `start`). In one process the
  hand-off is event-driven (the landed end pokes the scheduler, which claims at once), so
  `--poll` plays no part; the default (0.5 s) is used.
- `cross`: two `AgentRuntime`s (owners A and B), each with its own store instance on the same
  database (SQL stores only), cap 1. `--children` rounds: B's lead launches one child that sleeps
  50 ms + a uniform random share of `--poll` (so the end falls at a random phase of A's poll),
  then, once it runs, A's lead launches one child, which queues behind it; the figure is B's
  child's end landed -> A's child's start. On PostgreSQL B's end NOTIFYs A's store, whose
  listener pokes A's scheduler (`StateStore.add_queue_listener`); on SQLite nothing in A hears
  of it: A's scheduler finds the free slot on its next poll (every `--poll` s while a session
  waits there).
- `throughput`: `--leads` leads at once, each launching `--children` / `--leads` children
  through a cap of `--cap`. `children_per_s` = children / (first `execute` -> last end landed);
  `cpu_ms_per_child` is this process's CPU (the database server's is not counted). The most
  running at once is checked three ways, and each must be <= the cap (asserted):
  `max_running_runtime`, children between their `Lane.begin` returning and their `Lane.end`
  (the part of a slot's tenure the runtime sees: granted before, freed after), `max_in_model`,
  workers inside their model call, and the store's own `running` rows (`queue_counts`):
  `max_running_store` sampled every 20 ms, `max_running_after_claim` read after every claim
  that granted a slot (when the count is highest; one read per claim, in the scheduler's loop,
  so it slows the hand-off a little). At L = 0 a child runs from its `Lane.begin` to its end
  without yielding, so the first two read 1 there: the store's counts are the check.

Each run warms up first (one lead, 3 children) and prints one JSON line. `--all` reruns each
configuration x store as a fresh process, interleaved, `--rounds` times, and prints medians
(min..max) (bench/support.py `run_rounds`).

    python bench/background.py --mode handoff --store postgres --children 100 --latency-ms 5
    python bench/background.py --mode cross --store postgres --children 30 --poll 0.5
    python bench/background.py --mode throughput --store sqlite --children 1000 --cap 50
    python bench/background.py --all --rounds 3 --stores memory,sqlite,postgres

PostgreSQL: `BENCH_POSTGRES_URL` (bench/support.py); each run creates and drops a database.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import itertools
import json
import operator
import os
import random
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app import AgentRegistry, AgentRuntime, Delegation, define_agent
from app.models import Model, ModelEvent, ModelRequest, TextDelta, ToolCall, ToolCallReady
from app.protocol import STOPPED_STATUSES, UserMessage
from app.runtime.scheduler import BackgroundSettings, Scheduler
from app.runtime.tasks import Lane
from app.serve import settle_collector
from app.store import StateStore, create_store
from bench.support import noise, percentile, run_rounds, runqueue_wait, temporary_store, versions

MODES = ("handoff", "cross", "throughput")


@dataclass
class Probe:
    """What the wrapped runtime methods saw, by child session id (perf_counter seconds)."""

    landed: dict[str, float] = field(default_factory=dict)
    granted: dict[str, float] = field(default_factory=dict)
    begun: dict[str, float] = field(default_factory=dict)
    called: dict[str, float] = field(default_factory=dict)
    answered: dict[str, float] = field(default_factory=dict)
    running: int = 0
    """Sessions between their `Lane.begin` returning and their `Lane.end` (the end's write is
    made after it): a share of the time each holds its slot, so never more than the cap."""
    most_running: int = 0
    in_model: int = 0
    most_in_model: int = 0
    claims: int = 0
    count_after_claims: bool = False
    """Read the store's `running` rows after each claim that granted (throughput only)."""
    most_after_claim: int = 0
    expected: int = 0
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def reset(self, expected: int) -> None:
        for table in (self.landed, self.granted, self.begun, self.called, self.answered):
            table.clear()
        self.most_running = self.running
        self.most_in_model = self.in_model
        self.claims = 0
        self.most_after_claim = 0
        self.expected = expected
        self.done = asyncio.Event()

    def end(self, session_id: str) -> None:
        self.landed[session_id] = time.perf_counter()
        if self.expected and len(self.landed) >= self.expected:
            self.done.set()


PROBE = Probe()


def instrument() -> None:
    """Wrap `Scheduler.claim`, `Lane.begin` and `Lane.ended` to feed `PROBE`."""
    claim = Scheduler.claim
    begin = Lane.begin
    ended = Lane.ended

    async def claimed(self: Scheduler) -> list[str]:
        granted = await claim(self)
        now = time.perf_counter()
        PROBE.claims += 1
        for session_id in granted:
            PROBE.granted[session_id] = now
        if granted and PROBE.count_after_claims:
            running = (await self.store.queue_counts())[1]
            PROBE.most_after_claim = max(PROBE.most_after_claim, running)
        return granted

    async def begun(self: Lane, run: Any) -> None:
        await begin(self, run)
        PROBE.begun[run.session_id] = time.perf_counter()
        PROBE.running += 1
        PROBE.most_running = max(PROBE.most_running, PROBE.running)

    def landed(self: Lane, landed: asyncio.Future[None]) -> None:
        session_id = _ending.pop()
        landed.add_done_callback(lambda _: PROBE.end(session_id))
        ended(self, landed)

    end = Lane.end

    def ending(self: Lane, batch: Any, outcome: Any, session_id: str) -> None:
        PROBE.running -= 1
        _ending.append(session_id)
        end(self, batch, outcome, session_id)

    Scheduler.claim = claimed  # type: ignore[method-assign]
    Lane.begin = begun  # type: ignore[method-assign]
    Lane.ended = landed  # type: ignore[method-assign]
    Lane.end = ending  # type: ignore[method-assign]


_ending: list[str] = []
"""`Lane.end` hands the session id to the `Lane.ended` that follows it (no await between)."""


class WorkerModel(Model):
    """One model call: sleep the task's latency (`sleep S`), answer in the summary envelope."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        session_id = request.session_id
        PROBE.called[session_id] = time.perf_counter()
        PROBE.in_model += 1
        PROBE.most_in_model = max(PROBE.most_in_model, PROBE.in_model)
        try:
            task = next(m.content for m in request.messages if isinstance(m, UserMessage))
            seconds = float(task.split()[1])
            if seconds:
                await asyncio.sleep(seconds)
        finally:
            PROBE.in_model -= 1
        PROBE.answered[session_id] = time.perf_counter()
        yield TextDelta(
            "<subagent_background_result><summary>done</summary>"
            "<full_result>done</full_result></subagent_background_result>"
        )


class LeadModel(Model):
    """First response: the launches its task lists (`launch S1 S2 ...`: one child per sleep);
    then an answer (the turn ends, the children run on)."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        if any(m.role == "assistant" for m in request.messages):
            yield TextDelta("launched")
            return
        task = next(m.content for m in request.messages if isinstance(m, UserMessage))
        for i, seconds in enumerate(task.split()[1:]):
            arguments = {"category": "worker", "prompt": f"sleep {seconds}", "background": True}
            yield ToolCallReady(ToolCall("subagent", arguments, id=f"c{i:04d}"))


def build_registry() -> AgentRegistry:
    worker = define_agent("worker", description="Does one job.", model=WorkerModel())
    lead = define_agent("lead", model=LeadModel(), delegation=Delegation([worker]))
    return AgentRegistry([lead])


def runtime(store: StateStore, cap: int, poll: float) -> AgentRuntime:
    settings = BackgroundSettings(concurrency=cap, poll=poll)
    return AgentRuntime(build_registry(), store=store, takeover_interval=None, background=settings)


def launch_task(sleeps: Sequence[float]) -> str:
    return "launch " + " ".join(f"{s:g}" for s in sleeps)


async def stream_ended(store: StateStore, stream_id: str) -> None:
    """Return once the stream's run has stopped (its status only: no chunk is read)."""
    async with store.watch_stream(stream_id) as watch:
        after = 0
        while True:
            page = await watch.read(after=after, limit=0)
            if page.status in STOPPED_STATUSES:
                return
            after = page.last_sequence
            await watch.wait(1.0)


async def run_lead(runtime: AgentRuntime, sleeps: Sequence[float], session_id: str) -> None:
    """A lead's tree, to its end (its children's included), checked."""
    handle = await runtime.execute("lead", launch_task(sleeps), session_id=session_id)
    result = await handle.result()
    assert result.status == "completed", result
    await stream_ended(runtime.store, session_id)


async def until(probe: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise TimeoutError("the bench waited too long")
        await asyncio.sleep(0.001)


def check_cap(cap: int) -> None:
    """No more than `cap` children ran at once, as the runtime and the workers saw them."""
    assert PROBE.most_running <= cap, PROBE.most_running
    assert PROBE.most_in_model <= cap, PROBE.most_in_model


def ms(values: Sequence[float], q: float) -> float:
    return round(percentile([v * 1000 for v in values], q), 2)


async def warm_up(runtime: AgentRuntime, name: str = "warm") -> None:
    PROBE.reset(3)
    await run_lead(runtime, [0, 0, 0], name)
    await asyncio.wait_for(PROBE.done.wait(), 30)


async def handoff(store: StateStore, children: int, latency: float, cap: int, poll: float) -> Any:
    async with runtime(store, cap, poll) as rt:
        await warm_up(rt)
        PROBE.reset(children)
        await run_lead(rt, [latency] * children, "L")
        await asyncio.wait_for(PROBE.done.wait(), 60)
    order = sorted(PROBE.called, key=PROBE.called.__getitem__)
    pairs = list(itertools.pairwise(order))
    figures: dict[str, Any] = {"handoffs": len(pairs)}
    spans: dict[str, Callable[[str, str], float]] = {
        "claim": lambda a, b: PROBE.granted[b] - PROBE.landed[a],
        "begin": lambda a, b: PROBE.begun[b] - PROBE.landed[a],
        "start": lambda a, b: PROBE.called[b] - PROBE.landed[a],
        "gap": lambda a, b: PROBE.called[b] - PROBE.answered[a],
        "end": lambda a, b: PROBE.landed[a] - PROBE.answered[a],
    }
    for name, span in spans.items():
        values = [span(a, b) for a, b in pairs]
        figures[f"{name}_p50_ms"] = ms(values, 50)
        figures[f"{name}_p99_ms"] = ms(values, 99)
    figures["claims_per_child"] = round(PROBE.claims / children, 2)
    check_cap(cap)
    return figures


async def cross(url: str, rounds: int, cap: int, poll: float) -> Any:
    a_store, b_store = create_store(url), create_store(url)
    waits: list[float] = []
    async with a_store, b_store, runtime(a_store, cap, poll) as a, runtime(b_store, cap, poll) as b:
        await warm_up(a, "warmA")
        await warm_up(b, "warmB")
        PROBE.reset(2 * rounds)
        for i in range(rounds):
            sleep = 0.05 + random.uniform(0, poll)
            first = asyncio.create_task(run_lead(b, [round(sleep, 4)], f"B{i}"))
            blocker = f"B{i}-task-c0000"
            await until(functools.partial(operator.contains, PROBE.called, blocker), 30)
            second = asyncio.create_task(run_lead(a, [0], f"A{i}"))
            await asyncio.gather(first, second)
            waits.append(PROBE.called[f"A{i}-task-c0000"] - PROBE.landed[blocker])
        await asyncio.wait_for(PROBE.done.wait(), 30)
    check_cap(cap)
    return {
        "handoffs": rounds,
        "start_p50_ms": ms(waits, 50),
        "start_p99_ms": ms(waits, 99),
        "start_max_ms": ms(waits, 100),
        "start_mean_ms": round(sum(waits) * 1000 / len(waits), 2),
    }


async def throughput(store: StateStore, children: int, leads: int, latency: float, cap: int) -> Any:
    async with runtime(store, cap, 0.5) as rt:
        await warm_up(rt)
        PROBE.reset(children)
        most_running = 0
        sampling = True

        async def sample() -> None:
            nonlocal most_running
            while sampling:
                most_running = max(most_running, (await store.queue_counts())[1])
                await asyncio.sleep(0.02)

        sampler = asyncio.create_task(sample())
        PROBE.count_after_claims = True
        share = children // leads
        cpu, runq = time.process_time(), runqueue_wait(os.getpid())
        t0 = time.perf_counter()
        trees = [run_lead(rt, [latency] * share, f"L{i}") for i in range(leads)]
        await asyncio.gather(*trees)
        await asyncio.wait_for(PROBE.done.wait(), 600)
        wall = max(PROBE.landed.values()) - t0
        cpu, runq = time.process_time() - cpu, runqueue_wait(os.getpid()) - runq
        sampling = False
        await sampler
        left = await store.queue_counts()
    assert len(PROBE.called) == children, len(PROBE.called)
    assert left == (0, 0), left
    most = {
        "max_running_runtime": PROBE.most_running,
        "max_in_model": PROBE.most_in_model,
        "max_running_store": most_running,
        "max_running_after_claim": PROBE.most_after_claim,
    }
    print(f"most running at once (cap {cap}): {most}", file=sys.stderr)
    assert max(most.values()) <= cap, most
    launched = [PROBE.called[s] - t0 for s in PROBE.called]
    return {
        "wall_s": round(wall, 3),
        "children_per_s": round(children / wall, 1),
        "cpu_ms_per_child": round(cpu * 1000 / children, 3),
        "runq_ms_per_child": round(runq * 1000 / children, 3),
        "first_start_ms": ms(launched, 0),
        "claims_per_child": round(PROBE.claims / children, 3),
        **most,
    }


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    instrument()
    latency = args.latency_ms / 1000
    row: dict[str, Any] = {
        "mode": args.mode,
        "store": args.store,
        "children": args.children,
        "cap": args.cap,
        "latency_ms": args.latency_ms,
        "poll_s": args.poll,
    }
    async with temporary_store(args.store) as url:
        settle_collector()
        if args.mode == "cross":
            assert args.store != "memory", "two store instances share nothing on memory"
            row.update(await cross(url, args.children, args.cap, args.poll))
        else:
            async with create_store(url) as store:
                if args.mode == "handoff":
                    row.update(await handoff(store, args.children, latency, args.cap, args.poll))
                else:
                    row["leads"] = args.leads
                    row.update(
                        await throughput(store, args.children, args.leads, latency, args.cap)
                    )
    return {**row, **noise(), **versions()}


CONFIGS: list[tuple[str, list[str]]] = [
    ("handoff L=5", ["--mode", "handoff", "--children", "100", "--cap", "1", "--latency-ms", "5"]),
    ("cross poll=0.5", ["--mode", "cross", "--children", "20", "--cap", "1", "--poll", "0.5"]),
    ("cross poll=0.1", ["--mode", "cross", "--children", "20", "--cap", "1", "--poll", "0.1"]),
    ("1000 1x1000 L=0", ["--mode", "throughput", "--leads", "1", "--latency-ms", "0"]),
    ("1000 10x100 L=0", ["--mode", "throughput", "--leads", "10", "--latency-ms", "0"]),
    ("1000 10x100 L=20", ["--mode", "throughput", "--leads", "10", "--latency-ms", "20"]),
]
KEYS = [
    "start_p50_ms",
    "start_p99_ms",
    "claim_p50_ms",
    "gap_p50_ms",
    "children_per_s",
    "cpu_ms_per_child",
    "max_running_after_claim",
    "max_running_store",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mode", choices=MODES, default="handoff")
    parser.add_argument("--store", choices=["memory", "sqlite", "postgres"], default="memory")
    parser.add_argument("--children", type=int, default=1000)
    parser.add_argument("--leads", type=int, default=1)
    parser.add_argument("--cap", type=int, default=50)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--poll", type=float, default=0.5)
    parser.add_argument("--all", action="store_true", help="every configuration x store, medians")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--stores", default="memory,sqlite,postgres")
    args = parser.parse_args()
    if not args.all:
        print(json.dumps(asyncio.run(measure(args))))
        return
    configs = [
        (f"{label} {store}", [*argv, "--store", store])
        for store in args.stores.split(",")
        for label, argv in CONFIGS
        if not (store == "memory" and label.startswith("cross"))
    ]
    run_rounds(__file__, configs, args.rounds, KEYS)


if __name__ == "__main__":
    main()
