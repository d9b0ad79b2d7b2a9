"""What delegating through persistent children costs, against an ephemeral sub-agent call.

Same work in every variant: a parent delegates 3 subtasks in one step (3 tool calls in one model
response); each child finishes in one model call (`__finish__` with everything it was told).
Every model call sleeps `--latency-ms` once (0: pure overhead), then answers. `--trees` trees
run at once in one `AgentRuntime` (in process, no HTTP) over a fresh store of `--store`.

- `ephemeral`: 3 `subagent__child` calls (create_sub_agent_tool, as bench/peer_tree.py);
  then the parent answers. 5 model calls, critical path 3.
- `blocking`: 3 `companion__spawnAgent` of a blocking persistent child (each call's result is
  the child's output); then the parent answers. 5 model calls, critical path 3.
- `background`: 3 non-blocking spawns (each returns at once, `running`); the parent's next call
  answers and its turn ends; the tree's stream ends when the children end. The script waits
  for that (a status-only watch of the stream, no chunk read), then `runtime.resume(root,
  "report")`: the parent's next model call reads one system-message notice per child and
  answers. A tree's time runs to the end of that second turn (`turn2_p50_ms`: resume to its
  end). 6 model calls, critical path 3 (the parent's second call runs beside the children).
  A child answers only once its parent's second call has started (an asyncio.Event per tree):
  at L = 0 the children would otherwise end first and their notices reach that call, not the
  second turn (`notices_turn2` checks that all 3 arrive there).
- `continue`: 3 blocking spawns named `c0..c2`; in the next step 3 spawns of the same names,
  which continue the completed children (their conversation plus the new message, run again);
  then the parent answers. 9 model calls, critical path 5: `continue` - `blocking` is the
  price of 3 continuations in one step.

One JSON line per run: `wall_ms_per_tree` (the burst's wall / trees), `p50_ms` and `p99_ms`
(each tree's latency from `execute` to its last result), `cpu_ms_per_tree` (this process's
CPU time, user + system, over the burst / trees; the database server's is not counted),
`runq_ms_per_tree` (the time its threads waited for a CPU: the machine's load, not the code),
`writes_per_tree` (batches submitted to the store) and `rows_per_tree` (sessions, messages,
refs, chunk appends, stream updates and inbox entries in them), `reads_per_tree` (the
runtime's reads of sessions, conversations, refs and inboxes), and on SQL stores
`txns_per_tree` (group commits). A warm-up of 1 then 5 trees precedes the burst; the
collector is settled as the server does. `--all` reruns each variant x store as a fresh
process, interleaved, `--rounds` times, and prints medians (min..max).

    python bench/persistent_cost.py --variant blocking --store sqlite --trees 100
    python bench/persistent_cost.py --all --rounds 3 --stores memory,sqlite,postgres
    python bench/persistent_cost.py --all --rounds 3 --latency-ms 50

PostgreSQL: `BENCH_POSTGRES_URL` (bench/support.py); each run creates and drops a database.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app import AgentRegistry, AgentRuntime, PersistentAgent, create_sub_agent_tool, define_agent
from app.models import (
    Model,
    ModelEvent,
    ModelRequest,
    ModelResponse,
    TextDelta,
    ToolCall,
    ToolCallReady,
)
from app.protocol import STOPPED_STATUSES, SystemMessage, ToolMessage, UserMessage
from app.serve import settle_collector
from app.store import StateStore, WriteBatch, create_store
from bench.support import noise, percentile, run_rounds, runqueue_wait, temporary_store, versions

VARIANTS = ("ephemeral", "blocking", "background", "continue")
CHILDREN = 3
COUNTS: Counter[str] = Counter()
GATES: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
"""By root session: set once the parent of background children makes its second call."""


class Task(BaseModel):
    task: str


class ChildOutput(BaseModel):
    result: str


class ScriptedModel(Model):
    """Decide the reply from the conversation, sleep the latency once, answer (as peer_tree's
    PeerModel: FunctionModel would sleep once per word-sized delta)."""

    def __init__(
        self,
        decide: Callable[[ModelRequest], ModelResponse],
        latency: float,
        gated: bool = False,
    ) -> None:
        self.decide = decide
        self.latency = latency
        self.gated = gated

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        response = self.decide(request)
        if self.latency:
            await asyncio.sleep(self.latency)
        if self.gated:  # a background child: not before its parent's second call
            await GATES[request.session_id.partition("-agent-")[0]].wait()
        if response.text:
            yield TextDelta(response.text)
        for call in response.tool_calls:
            yield ToolCallReady(call)


def child_model(request: ModelRequest) -> ModelResponse:
    COUNTS["model_child"] += 1
    told = [m.content for m in request.messages if isinstance(m, UserMessage)]
    return ModelResponse(tool_calls=[ToolCall("__finish__", {"result": "; ".join(told)})])


def spawn(i: int, task: str, named: bool) -> ToolCall:
    arguments = {"agent": "child", "initialMessage": f"{task} {i}"}
    if named:
        arguments["name"] = f"c{i}"
    return ToolCall("companion__spawnAgent", arguments)


def parent_model(variant: str) -> Callable[[ModelRequest], ModelResponse]:
    def decide(request: ModelRequest) -> ModelResponse:
        COUNTS["model_parent"] += 1
        users = [i for i, m in enumerate(request.messages) if isinstance(m, UserMessage)]
        turn = request.messages[users[-1] :]
        step = sum(m.role == "assistant" for m in turn)
        notices = [m for m in turn if isinstance(m, SystemMessage)]
        if len(users) == 2:  # background, the second turn ("report")
            COUNTS["notices_turn2"] += len(notices)
            return ModelResponse(text=f"report: {len(notices)} notices")
        if step == 0:
            if variant == "ephemeral":
                calls = [
                    ToolCall("subagent__child", {"task": f"subtask {i}"}) for i in range(CHILDREN)
                ]
            else:
                calls = [spawn(i, "subtask", variant == "continue") for i in range(CHILDREN)]
            return ModelResponse(tool_calls=calls)
        if step == 1 and variant == "background":
            GATES[request.session_id].set()
        if step == 1 and variant == "continue":
            return ModelResponse(tool_calls=[spawn(i, "again", True) for i in range(CHILDREN)])
        results = [m.result for m in turn if isinstance(m, ToolMessage)]
        return ModelResponse(text=json.dumps(results))

    return decide


def build_registry(variant: str, latency: float) -> AgentRegistry:
    child = define_agent(
        "child",
        description="Does one subtask.",
        output_schema=ChildOutput,
        model=ScriptedModel(child_model, latency, gated=variant == "background"),
    )
    options: dict[str, Any] = {}
    if variant == "ephemeral":
        options["tools"] = [create_sub_agent_tool(child, Task, description="Delegate a subtask.")]
    else:
        blocking = variant != "background"
        options["persistent_agents"] = [
            PersistentAgent(child, mode="blocking" if blocking else "non-blocking")
        ]
    parent = define_agent("parent", model=ScriptedModel(parent_model(variant), latency), **options)
    return AgentRegistry([parent])


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


async def run_tree(runtime: AgentRuntime, variant: str) -> tuple[float, float]:
    """One tree: its latency and its second turn's (background), in seconds, once checked."""
    t0 = time.perf_counter()
    handle = await runtime.execute("parent", "go")
    result = await handle.result()
    assert result.status == "completed", result
    if variant == "background":
        await stream_ended(runtime.store, handle.session_id)
        t1 = time.perf_counter()
        handle = await runtime.resume(handle.session_id, "report")
        result = await handle.result()
        assert (result.status, result.output) == ("completed", "report: 3 notices"), result
        return time.perf_counter() - t0, time.perf_counter() - t1
    assert isinstance(result.output, str)
    results = json.loads(result.output)
    expected = [f"subtask {i}" for i in range(CHILDREN)]
    if variant == "ephemeral":
        expected = [json.dumps({"task": task}, separators=(",", ":")) for task in expected]
    elif variant == "continue":
        expected += [f"subtask {i}; again {i}" for i in range(CHILDREN)]
    assert [r["result"] for r in results] == expected, results
    return time.perf_counter() - t0, 0.0


READS = ("get_session", "load_messages", "get_sub_session_refs", "read_inbox", "read_messages")
ROWS = ("new_sessions", "updated_sessions", "messages", "refs", "chunks", "streams", "inbox")
"""The fields of a batch counted as rows (with `inbox_taken`)."""


def count_io(store: StateStore) -> None:
    """Count in COUNTS the batches submitted to the store, their rows, and the runtime's reads."""
    submit = store.submit

    def counted(batch: WriteBatch, *, hold: bool = False) -> asyncio.Future[None]:
        COUNTS["writes"] += 1
        COUNTS["rows"] += sum(len(getattr(batch, name)) for name in ROWS) + len(batch.inbox_taken)
        return submit(batch, hold=hold)

    def reader(read: Callable[..., Any]) -> Callable[..., Any]:
        def counted_read(*args: Any, **kwargs: Any) -> Any:
            COUNTS["reads"] += 1
            return read(*args, **kwargs)

        return counted_read

    store.submit = counted  # type: ignore[method-assign]
    for name in READS:
        setattr(store, name, reader(getattr(store, name)))


async def measure(variant: str, trees: int, latency_ms: float, store_kind: str) -> dict[str, Any]:
    registry = build_registry(variant, latency_ms / 1000)
    async with temporary_store(store_kind) as url:
        store = create_store(url)
        async with store, AgentRuntime(registry, store=store, takeover_interval=None) as runtime:
            settle_collector()
            count_io(store)
            await run_tree(runtime, variant)
            await asyncio.gather(*(run_tree(runtime, variant) for _ in range(5)))
            before = COUNTS.copy()
            groups = getattr(store, "commit_groups", None)
            cpu, runq = time.process_time(), runqueue_wait(os.getpid())
            t0 = time.perf_counter()
            timed = await asyncio.gather(*(run_tree(runtime, variant) for _ in range(trees)))
            wall = time.perf_counter() - t0
            cpu, runq = time.process_time() - cpu, runqueue_wait(os.getpid()) - runq
            groups = None if groups is None else store.commit_groups - groups  # type: ignore[attr-defined]
    delta = {key: COUNTS[key] - before[key] for key in COUNTS}
    parent_calls = {"ephemeral": 2, "blocking": 2, "background": 3, "continue": 3}[variant]
    child_calls = CHILDREN * (2 if variant == "continue" else 1)
    assert delta.get("model_parent") == parent_calls * trees, delta
    assert delta.get("model_child") == child_calls * trees, delta
    ms = [total * 1000 for total, _ in timed]
    background = variant == "background"
    turn2 = round(percentile([t * 1000 for _, t in timed], 50), 1) if background else None
    return {
        "variant": variant,
        "store": store_kind,
        "trees": trees,
        "latency_ms": latency_ms,
        "wall_s": round(wall, 3),
        "wall_ms_per_tree": round(wall * 1000 / trees, 3),
        "p50_ms": round(percentile(ms, 50), 1),
        "p99_ms": round(percentile(ms, 99), 1),
        "cpu_ms_per_tree": round(cpu * 1000 / trees, 3),
        "runq_ms_per_tree": round(runq * 1000 / trees, 3),
        "writes_per_tree": round(delta.get("writes", 0) / trees, 2),
        "rows_per_tree": round(delta.get("rows", 0) / trees, 2),
        "reads_per_tree": round(delta.get("reads", 0) / trees, 2),
        "txns_per_tree": None if groups is None else round(groups / trees, 2),
        "turn2_p50_ms": turn2,
        "notices_turn2": delta.get("notices_turn2", 0) / trees if background else None,
        **noise(),
        **versions(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--variant", choices=VARIANTS, default="blocking")
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--store", choices=["memory", "sqlite", "postgres"], default="memory")
    parser.add_argument("--all", action="store_true", help="every variant x store, medians")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--stores", default="memory,sqlite,postgres")
    args = parser.parse_args()
    if not args.all:
        row = asyncio.run(measure(args.variant, args.trees, args.latency_ms, args.store))
        print(json.dumps(row))
        return
    common = ["--trees", str(args.trees), "--latency-ms", str(args.latency_ms)]
    configs = [
        (f"{variant} {store}", ["--variant", variant, "--store", store, *common])
        for store in args.stores.split(",")
        for variant in VARIANTS
    ]
    keys = ["wall_ms_per_tree", "p50_ms", "cpu_ms_per_tree", "runq_ms_per_tree"]
    keys += ["writes_per_tree", "reads_per_tree", "txns_per_tree", "turn2_p50_ms"]
    run_rounds(__file__, configs, args.rounds, keys)


if __name__ == "__main__":
    main()
