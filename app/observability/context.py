"""Which run the running code belongs to: one `RunScope` per session run, in a contextvar.

The run's task sets it when the run starts, and every task the run creates (tool calls run in
parallel, children's lives) copies it, so a log line written anywhere inside a run, by our code
or an agent's tool, names the session, its root, the agent type, the step and the trace. A
child's run sets its own scope in its own task; its parent's is left as it was.
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from typing import TYPE_CHECKING, Protocol

from app.observability.metrics import for_agent

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span


class ObservedRecord(Protocol):
    """The part of a session record a scope reads."""

    @property
    def stream_id(self) -> str:
        """The root session's id (its stream)."""

    @property
    def agent_type(self) -> str:
        """The session's agent type."""

    @property
    def parent_session_id(self) -> str | None:
        """The parent session, for a child."""

    @property
    def step_count(self) -> int:
        """Steps committed so far."""


class ObservedRun(Protocol):
    """What observing a session run needs of it (`app.runtime.session.SessionRun` fits)."""

    @property
    def session_id(self) -> str:
        """The session's id."""

    @property
    def step(self) -> int:
        """The step in progress (1-based)."""

    @property
    def record(self) -> ObservedRecord:
        """The session as last committed."""


class RunScope:
    """One run of one session as logs, metrics and traces see it, with the run's figures."""

    __slots__ = (
        "agent_type",
        "input_tokens",
        "metrics",
        "model_calls",
        "output_tokens",
        "root_id",
        "run",
        "session_id",
        "span",
        "span_context",
        "started",
        "step_context",
        "step_span",
        "step_span_number",
        "tool_calls",
    )

    def __init__(self, run: ObservedRun) -> None:
        self.run = run
        self.session_id = run.session_id
        self.root_id = run.record.stream_id
        self.agent_type = run.record.agent_type
        self.metrics = for_agent(self.agent_type)
        """The agent type's metrics."""
        self.started = time.perf_counter()
        self.model_calls = 0
        self.tool_calls = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.span: Span | None = None
        """The run's span, when tracing is on."""
        self.span_context: Context | None = None
        """The context with the run's span current (made once: each costs a copy)."""
        self.step_context: Context | None = None
        """The context with the step's span current, the parent of the step's calls."""
        self.step_span: Span | None = None
        """The span of the step in progress, made when the step's first call starts."""
        self.step_span_number = 0

    @property
    def step(self) -> int:
        """The run's step now."""
        return self.run.step

    @property
    def trace_id(self) -> str | None:
        """The run's trace id (32 hex digits), when tracing is on."""
        if self.span is None:
            return None
        return format(self.span.get_span_context().trace_id, "032x")

    def fields(self) -> dict[str, object]:
        """What every log line about this run carries."""
        return {
            "session_id": self.session_id,
            "root_id": self.root_id,
            "agent_type": self.agent_type,
            "step": self.run.step,
            "trace_id": self.trace_id,
        }


current_run: ContextVar[RunScope | None] = ContextVar("current_run", default=None)
"""The run the running code belongs to, if any."""
