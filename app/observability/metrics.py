"""The server's Prometheus metrics (the official `prometheus-client`), served at `/metrics`.

Single process: the metrics live in `prometheus_client.REGISTRY` with the client's process and
GC collectors. Several workers: set `PROMETHEUS_MULTIPROC_DIR` to an empty folder before the
workers start (`app.serve` does it for you); each worker then writes its values to files there
and `/metrics`, whichever worker answers, adds up every worker's (live gauges only for workers
alive). The client picks the mode when it is first imported, so the variable must be set before.

Hot paths pay an increment per event, nothing more: label children are bound once per agent
type and tool (`for_agent`, `for_tool`), never through `.labels()` per event, and their values
are incremented directly (`value_of`, `Observed`). The client's own `inc()` and `observe()`
check their amount and labels on every call: four Python calls per increment where one does,
which made the metrics cost 6% of a tree's instructions over HTTP (bench/HTTP.md, Operations).
The label values are bounded: agent types and tool names come from the registry, statuses and
outcomes from fixed sets.
"""

from __future__ import annotations

import bisect
import contextlib
import glob
import os
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

MODEL_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
TOOL_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0)
RUN_BUCKETS = (0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)
COMMIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
GROUP_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)

RUNS_STARTED = Counter(
    "agent_runs_started", "Session runs started (fresh, resumed or taken over)", ["agent_type"]
)
RUNS_ENDED = Counter(
    "agent_runs_ended",
    "Session runs ended, by status (`abandoned`: stopped by a shutdown or a store failure, "
    "left for a takeover)",
    ["agent_type", "status"],
)
RUN_SECONDS = Histogram(
    "agent_run_duration_seconds", "Duration of session runs", ["agent_type"], buckets=RUN_BUCKETS
)
SESSIONS_ACTIVE = Gauge(
    "agent_sessions_active",
    "Sessions running in this server now",
    ["agent_type"],
    multiprocess_mode="livesum",
)
MODEL_CALLS = Counter(
    "agent_model_calls", "Model calls, by outcome (ok, error, cancelled)", ["agent_type", "outcome"]
)
MODEL_SECONDS = Histogram(
    "agent_model_call_duration_seconds",
    "Duration of model calls (streamed to the end)",
    ["agent_type"],
    buckets=MODEL_BUCKETS,
)
MODEL_TOKENS = Counter(
    "agent_model_tokens", "Tokens models reported, by kind (input, output)", ["agent_type", "kind"]
)
TOOL_CALLS = Counter(
    "agent_tool_calls",
    "Function tool calls, by outcome (ok, error, cancelled)",
    ["tool", "outcome"],
)
TOOL_SECONDS = Histogram(
    "agent_tool_call_duration_seconds", "Duration of function tool calls", ["tool"],
    buckets=TOOL_BUCKETS,
)  # fmt: skip
DELEGATIONS = Counter(
    "agent_delegations", "Sub-agent calls (local or remote), by the child's type", ["agent_type"]
)
COMMIT_SECONDS = Histogram(
    "agent_store_commit_duration_seconds",
    "Duration of the store's group commits (one transaction each)",
    buckets=COMMIT_BUCKETS,
)
COMMIT_GROUP = Histogram(
    "agent_store_commit_group_size",
    "Write batches per group commit",
    buckets=GROUP_BUCKETS,
)
COMMIT_FAILURES = Counter("agent_store_commit_failures", "Group commits that failed")
SSE_CLIENTS = Gauge(
    "agent_sse_clients", "SSE streams open now", multiprocess_mode="livesum"
)  # fmt: skip
SSE_CHUNKS = Counter("agent_sse_chunks_sent", "Chunks sent to SSE clients")
TAKEOVERS = Counter(
    "agent_takeovers", "Sessions taken over from a server that was gone (or restarted)"
)
REMOTE_RECONNECTS = Counter(
    "agent_remote_reconnects", "Reconnections to a remote sub-agent's stream after it dropped"
)
SCHEDULER_QUEUE = Gauge(
    "agent_scheduler_queue_length",
    "Background sub-agents queued behind the scheduler's concurrency cap",
    multiprocess_mode="livesum",
)


class Observed:
    """A histogram child, observed without the client's per-call checks: the sum, then the
    first bucket whose bound holds the value (what `Histogram.observe` does, in 3 calls, not 5)."""

    __slots__ = ("bounds", "buckets", "sum")

    def __init__(self, child: Any) -> None:
        self.sum = child._sum
        self.buckets = child._buckets
        self.bounds = child._upper_bounds

    def observe(self, value: float) -> None:
        """Record one observation."""
        self.sum.inc(value)
        self.buckets[bisect.bisect_left(self.bounds, value)].inc(1)


def value_of(child: Any) -> Any:
    """A counter's or gauge's child as the value it increments (`.inc(n)`): one call per event
    instead of four (`inc` checks its amount and its labels every time)."""
    return child._value


class AgentMetrics:
    """Every metric of one agent type, its label children bound once (per process), so a run,
    a model call or a tool call costs a few increments and no label lookups."""

    __slots__ = (
        "_model_calls",
        "_runs_ended",
        "active",
        "agent_type",
        "delegations",
        "input_tokens",
        "model_seconds",
        "output_tokens",
        "run_seconds",
        "runs_started",
    )

    def __init__(self, agent_type: str) -> None:
        self.agent_type = agent_type
        self.runs_started = value_of(RUNS_STARTED.labels(agent_type))
        self.active = value_of(SESSIONS_ACTIVE.labels(agent_type))
        self.run_seconds = Observed(RUN_SECONDS.labels(agent_type))
        self.model_seconds = Observed(MODEL_SECONDS.labels(agent_type))
        self.input_tokens = value_of(MODEL_TOKENS.labels(agent_type, "input"))
        self.output_tokens = value_of(MODEL_TOKENS.labels(agent_type, "output"))
        self.delegations = value_of(DELEGATIONS.labels(agent_type))
        self._runs_ended: dict[str, Any] = {}
        self._model_calls: dict[str, Any] = {}

    def runs_ended(self, status: str) -> Any:
        """The ended-runs value for `status`."""
        ended = self._runs_ended.get(status)
        if ended is None:
            ended = self._runs_ended[status] = value_of(RUNS_ENDED.labels(self.agent_type, status))
        return ended

    def model_calls(self, outcome: str) -> Any:
        """The model-calls value for `outcome`."""
        calls = self._model_calls.get(outcome)
        if calls is None:
            calls = self._model_calls[outcome] = value_of(
                MODEL_CALLS.labels(self.agent_type, outcome)
            )
        return calls


class ToolMetrics:
    """One tool's metrics, bound once."""

    __slots__ = ("_calls", "seconds", "tool")

    def __init__(self, tool: str) -> None:
        self.tool = tool
        self.seconds = Observed(TOOL_SECONDS.labels(tool))
        self._calls: dict[str, Any] = {}

    def calls(self, outcome: str) -> Any:
        """The tool-calls value for `outcome`."""
        calls = self._calls.get(outcome)
        if calls is None:
            calls = self._calls[outcome] = value_of(TOOL_CALLS.labels(self.tool, outcome))
        return calls


_agents: dict[str, AgentMetrics] = {}
_tools: dict[str, ToolMetrics] = {}


def for_agent(agent_type: str) -> AgentMetrics:
    """The agent type's metrics (bound on first use)."""
    bound = _agents.get(agent_type)
    if bound is None:
        bound = _agents[agent_type] = AgentMetrics(agent_type)
    return bound


def for_tool(tool: str) -> ToolMetrics:
    """The tool's metrics (bound on first use)."""
    bound = _tools.get(tool)
    if bound is None:
        bound = _tools[tool] = ToolMetrics(tool)
    return bound


commit_seconds = Observed(COMMIT_SECONDS)
commit_group_size = Observed(COMMIT_GROUP)
sse_clients = value_of(SSE_CLIENTS)
sse_chunks = value_of(SSE_CHUNKS)


def multiprocess_dir() -> str | None:
    """The folder workers share their metrics through, when several run."""
    return os.environ.get(MULTIPROC_ENV) or None


def render() -> tuple[bytes, str]:
    """The exposition of every metric (every worker's, in multi-process mode) and its type."""
    folder = multiprocess_dir()
    if folder is None:
        return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=folder)  # type: ignore[no-untyped-call]
    return generate_latest(registry), CONTENT_TYPE_LATEST


def worker_started() -> None:
    """In multi-process mode, forget the live gauges of workers that died without saying so
    (killed, crashed): their sessions and streams are not open any more."""
    folder = multiprocess_dir()
    if folder is None:
        return
    for path in glob.glob(os.path.join(folder, "gauge_live*_*.db")):
        pid_text = os.path.basename(path).rpartition("_")[2].removesuffix(".db")
        if pid_text.isdigit() and not _alive(int(pid_text)):
            multiprocess.mark_process_dead(int(pid_text), folder)  # type: ignore[no-untyped-call]


def worker_stopped() -> None:
    """In multi-process mode, drop this worker's live gauges as it stops."""
    folder = multiprocess_dir()
    if folder is not None:
        multiprocess.mark_process_dead(os.getpid(), folder)  # type: ignore[no-untyped-call]


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def prepare_multiprocess_dir(folder: str) -> None:
    """Empty `folder` (made if missing) for a fresh set of workers: values left by an earlier
    server would otherwise be added to theirs."""
    os.makedirs(folder, exist_ok=True)
    for path in glob.glob(os.path.join(folder, "*.db")):
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
