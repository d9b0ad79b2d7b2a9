"""The seam the runtime, the store and the API call: each hook feeds logs, metrics and traces.

Every site that calls one is a single line, so the runtime can move around them:

| hook | called from | gives |
| --- | --- | --- |
| `@observe_run` | `SessionRun.run` | log scope; start/end lines; runs, active sessions; run span |
| `model_call()`, `.ended(usage)` | `SessionRun._model_phase` | model calls, latency, tokens; span |
| `tool_call(name, call)` | `dispatch._execute` | tool calls and latency; tool span (current) |
| `delegation(type, id, life)` | `delegation.delegate` | delegations; delegate span (current) |
| `timed_commit(apply)` | `SqlStore.__init__` | commit latency, group size, failures |
| `sse_client()` / `chunks_sent(n)` | `routes.stream` | SSE clients, chunks sent |
| `takeover(id)` | `AgentRuntime.take_over` | takeovers |
| `remote_reconnect()` | `HttpRemoteAgentTransport.stream` | remote reconnects |
| `trace_headers()` | `HttpRemoteAgentTransport.start/resume` | W3C trace context to remotes |
| `scheduler_queue_length(n)` | the scheduler, once it exists | queue length |
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

from app.models.base import Usage
from app.observability import metrics, tracing
from app.observability.context import ObservedRun, RunScope, current_run

if TYPE_CHECKING:
    from opentelemetry.trace import Span

logger = logging.getLogger("app.runs")

T = TypeVar("T")
RunT = TypeVar("RunT", bound=ObservedRun)


class ObservedOutcome(Protocol):
    """How a run ended (`app.runtime.outcome.Outcome` fits)."""

    @property
    def status(self) -> str:
        """The session's status after the run."""

    @property
    def error(self) -> str | None:
        """The error, for a failed run."""


OutcomeT = TypeVar("OutcomeT", bound=ObservedOutcome)


def observe_run(
    run: Callable[[RunT], Awaitable[OutcomeT]],
) -> Callable[[RunT], Awaitable[OutcomeT]]:
    """Decorates `SessionRun.run`: the run's scope for everything inside it, its start and end
    lines, its metrics and its span. A run that raises (a shutdown, a store failure: it is left
    for a takeover) ends `abandoned`; the exception goes on unchanged."""

    @functools.wraps(run)
    async def observed(session: RunT) -> OutcomeT:
        scope = RunScope(session)
        token = current_run.set(scope)
        record = session.record
        span_token = (
            tracing.start_run(scope, record.parent_session_id, record.step_count)
            if tracing.tracer is not None
            else None
        )
        bound = scope.metrics
        bound.runs_started.inc(1)
        bound.active.inc(1)
        if logger.isEnabledFor(logging.INFO):
            logger.info(
                "Run started",
                extra={
                    "fields": {
                        "parent_session_id": record.parent_session_id,
                        "resumed_at_step": record.step_count,
                    }
                },
            )
        status, error = "abandoned", None
        try:
            outcome = await run(session)
            status, error = outcome.status, outcome.error
            return outcome
        except asyncio.CancelledError:
            error = "stopped by a shutdown"
            raise
        except BaseException as exc:
            error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            _run_ended(scope, status, error)
            bound.active.inc(-1)
            if span_token is not None:
                tracing.end_run(scope, span_token, status, error)
            current_run.reset(token)

    return observed


def _run_ended(scope: RunScope, status: str, error: str | None) -> None:
    seconds = time.perf_counter() - scope.started
    scope.metrics.runs_ended(status).inc(1)
    scope.metrics.run_seconds.observe(seconds)
    level = logging.WARNING if status == "abandoned" else logging.INFO
    if not logger.isEnabledFor(level):
        return
    fields: dict[str, object] = {
        "status": status,
        "duration_ms": round(seconds * 1000, 1),
        "steps": scope.run.record.step_count,
        "model_calls": scope.model_calls,
        "tool_calls": scope.tool_calls,
        "input_tokens": scope.input_tokens,
        "output_tokens": scope.output_tokens,
    }
    if error is not None:
        fields["error"] = error
    logger.log(level, "Run ended", extra={"fields": fields})


class ModelCall:
    """One model call, from `model_call()` to `ended(usage)` (called in the `finally` that
    closes the model's stream, so an exception on its way out is the call's outcome). Nothing
    runs per streamed event."""

    __slots__ = ("scope", "span", "started")

    def __init__(self) -> None:
        self.scope = current_run.get()
        self.span: Span | None = None
        if tracing.tracer is not None:
            agent_type = self.scope.agent_type if self.scope is not None else "unknown"
            self.span = tracing.start_call(
                self.scope, f"model {agent_type}", {"agent.type": agent_type}
            )
        self.started = time.perf_counter()

    def ended(self, usage: Usage | None) -> None:
        """The call is over: `usage` is what it reported (None for nothing); the exception
        being handled, if any, is how it failed."""
        seconds = time.perf_counter() - self.started
        failure = sys.exc_info()[1]
        if failure is None:
            outcome = "ok"
        elif isinstance(failure, asyncio.CancelledError | GeneratorExit):
            outcome = "cancelled"
        else:
            outcome = "error"
        scope = self.scope
        bound = scope.metrics if scope is not None else metrics.for_agent("unknown")
        bound.model_calls(outcome).inc(1)
        bound.model_seconds.observe(seconds)
        input_tokens = output_tokens = 0
        if usage is not None:
            input_tokens, output_tokens = usage.input_tokens, usage.output_tokens
            if input_tokens:
                bound.input_tokens.inc(input_tokens)
            if output_tokens:
                bound.output_tokens.inc(output_tokens)
        if scope is not None:
            scope.model_calls += 1
            scope.input_tokens += input_tokens
            scope.output_tokens += output_tokens
        if self.span is not None:
            if input_tokens or output_tokens:
                self.span.set_attributes(
                    {
                        "gen_ai.usage.input_tokens": input_tokens,
                        "gen_ai.usage.output_tokens": output_tokens,
                    }
                )
            error = None if failure is None else f"{type(failure).__name__}: {failure}"
            tracing.end_call(self.span, outcome, error)


def model_call() -> ModelCall:
    """A model call starts (its stream is about to be read); call `.ended(usage)` when done."""
    return ModelCall()


async def tool_call(name: str, call: Awaitable[T]) -> T:
    """Await a function tool's call (`execute_tool(...)`), timed and counted; the outcome is
    `error` when the result carries one."""
    scope = current_run.get()
    span = token = None
    if tracing.tracer is not None:
        span = tracing.start_call(scope, f"tool {name}", {"agent.tool": name})
        token = tracing.attach(span)
    started = time.perf_counter()
    outcome, error = "error", None
    try:
        result = await call
        error = getattr(result, "error", None)
        outcome = "error" if error else "ok"
        return result
    except asyncio.CancelledError:
        outcome = "cancelled"
        raise
    finally:
        bound = metrics.for_tool(name)
        bound.calls(outcome).inc(1)
        bound.seconds.observe(time.perf_counter() - started)
        if scope is not None:
            scope.tool_calls += 1
        if span is not None:
            tracing.detach(token)
            tracing.end_call(span, outcome, error)


async def delegation(agent_type: str, child_id: str, life: Awaitable[OutcomeT]) -> OutcomeT:
    """Run a child's whole life (local or remote) as the task `delegate` starts, counted and,
    when tracing, inside a `delegate` span that the child's run (or the remote's `/start`)
    continues."""
    metrics.for_agent(agent_type).delegations.inc(1)
    if tracing.tracer is None:
        return await life
    span = tracing.start_call(
        current_run.get(),
        f"delegate {agent_type}",
        {"agent.child_type": agent_type, "agent.child_session_id": child_id},
    )
    token = tracing.attach(span)
    outcome, error = "error", None
    try:
        result = await life
        error = result.error
        outcome = "ok" if result.status == "completed" else "error"
        return result
    except asyncio.CancelledError:
        outcome = "cancelled"
        raise
    finally:
        tracing.detach(token)
        tracing.end_call(span, outcome, error)


Apply = Callable[[Sequence[T]], Awaitable[None]]


def timed_commit(apply: Apply[T]) -> Apply[T]:
    """The store's group-commit function, timed per transaction with its group's size."""
    seconds = metrics.commit_seconds
    sizes = metrics.commit_group_size

    async def timed(batches: Sequence[T]) -> None:
        started = time.perf_counter()
        try:
            await apply(batches)
        except Exception:
            metrics.COMMIT_FAILURES.inc()
            raise
        seconds.observe(time.perf_counter() - started)
        sizes.observe(len(batches))

    return timed


@contextlib.asynccontextmanager
async def sse_client() -> AsyncIterator[None]:
    """Counts an SSE stream as open while the block runs."""
    metrics.sse_clients.inc(1)
    try:
        yield
    finally:
        metrics.sse_clients.inc(-1)


chunks_sent: Callable[[int], None] = metrics.sse_chunks.inc
"""`chunks_sent(count)`: `count` chunks went out to an SSE client (once per page written)."""


def takeover(session_id: str) -> None:
    """This server takes over `session_id`, whose server is gone (the runtime logs it)."""
    metrics.TAKEOVERS.inc()


def remote_reconnect() -> None:
    """A remote sub-agent's stream dropped and is being reconnected."""
    metrics.REMOTE_RECONNECTS.inc()


def scheduler_queue_length(length: int) -> None:
    """The background scheduler's queue length now (its hook: the scheduler is to come)."""
    metrics.SCHEDULER_QUEUE.set(length)


def trace_headers() -> dict[str, str]:
    """W3C trace context for a request to another agent server (empty when tracing is off)."""
    return tracing.trace_headers()
