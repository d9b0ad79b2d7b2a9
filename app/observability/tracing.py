"""OpenTelemetry traces (the official SDK): a span per run, step, model call, tool call and
delegation, and W3C trace context across servers.

Off unless the standard variables ask for it (`configure_from_env`): an OTLP endpoint
(`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), or `OTEL_TRACES_EXPORTER`
set to `otlp` or `console`; `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` keep it off.
Everything else (service name and resource, sampler, batch sizes, headers, timeouts) the SDK
reads from its own `OTEL_*` variables. Off, every entry point here is one test of `tracer`.

Spans: `run <agent>` (its parent is the incoming `traceparent` of `/start`, or the delegation
that started the child), `step <n>` under it (opened by the step's first call), and under the
step `model <agent>`, `tool <name>` and `delegate <agent>`; a child's `run` sits under its
`delegate`, also on another server, whose `/start` got the delegation's `traceparent`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from starlette.types import ASGIApp, Receive, Scope, Send

from app.errors import DefinitionError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

    from app.observability.context import RunScope

logger = logging.getLogger(__name__)

TRACER_NAME = "agent-server"

tracer: trace.Tracer | None = None
"""The tracer spans are made with; None while tracing is off."""
_provider: TracerProvider | None = None


def wanted(environ: Mapping[str, str]) -> bool:
    """Whether the standard variables ask for traces."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(
        environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def configure_from_env(environ: Mapping[str, str]) -> bool:
    """Turn tracing on, process-wide, if the standard variables ask for it; whether it is on.
    A setting this server cannot honour raises `DefinitionError` (a configuration mistake)."""
    if tracer is not None:
        return True
    if not wanted(environ):
        return False
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    provider = TracerProvider()  # resource, sampler and limits from the OTEL_* variables
    for name in (environ.get("OTEL_TRACES_EXPORTER") or "otlp").split(","):
        name = name.strip().lower()
        if name == "otlp":
            provider.add_span_processor(BatchSpanProcessor(_otlp_exporter(environ)))
        elif name == "console":
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
        elif name != "none":
            raise DefinitionError(
                f"OTEL_TRACES_EXPORTER={name!r} is not supported here: use otlp, console or none"
            )
    trace.set_tracer_provider(provider)
    install(provider)
    return True


def _otlp_exporter(environ: Mapping[str, str]) -> SpanExporter:
    protocol = (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    if protocol != "http/protobuf":
        raise DefinitionError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r} is not supported here: this server "
            "exports OTLP over http/protobuf (port 4318 of a collector)"
        )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()  # endpoint, headers, timeout from the OTEL_* variables


def install(provider: TracerProvider) -> None:
    """Make spans with `provider` from now on (tests install one with an in-memory exporter)."""
    global tracer, _provider
    _provider = provider
    tracer = provider.get_tracer(TRACER_NAME)


def uninstall() -> None:
    """Turn tracing off (spans already made are left to their provider)."""
    global tracer, _provider
    tracer = None
    _provider = None


FLUSH_TIMEOUT_MS = 3000
"""Longest a stopping server waits for its last spans to be exported (a collector that does
not answer must not hold the shutdown)."""


def flush() -> None:
    """Export the spans still buffered (a server that stops would lose them), within
    `FLUSH_TIMEOUT_MS`."""
    if _provider is not None:
        _provider.force_flush(FLUSH_TIMEOUT_MS)


# -- spans -----------------------------------------------------------------------------------------


def start_run(scope: RunScope, parent_session_id: str | None, step_count: int) -> object:
    """Open the run's span as a child of the current context (the incoming trace, or the
    delegation running the child) and make it current; the token for `end_run`."""
    assert tracer is not None
    span = tracer.start_span(
        f"run {scope.agent_type}",
        kind=SpanKind.INTERNAL,
        attributes={
            "agent.session_id": scope.session_id,
            "agent.root_id": scope.root_id,
            "agent.type": scope.agent_type,
            "agent.parent_session_id": parent_session_id or "",
            "agent.resumed_at_step": step_count,
        },
    )
    scope.span = span
    scope.span_context = trace.set_span_in_context(span)
    return otel_context.attach(scope.span_context)


def end_run(scope: RunScope, token: object, status: str, error: str | None) -> None:
    """Close the run's span (and its last step's) with the run's outcome and figures."""
    span = scope.span
    if span is None:
        return
    if scope.step_span is not None:
        scope.step_span.end()
        scope.step_span = None
    span.set_attributes(
        {
            "agent.status": status,
            "agent.steps": scope.run.record.step_count,
            "agent.model_calls": scope.model_calls,
            "agent.tool_calls": scope.tool_calls,
            "gen_ai.usage.input_tokens": scope.input_tokens,
            "gen_ai.usage.output_tokens": scope.output_tokens,
        }
    )
    if status in ("failed", "abandoned"):
        span.set_status(Status(StatusCode.ERROR, error))
    span.end()
    otel_context.detach(token)  # type: ignore[arg-type]


def step_context(scope: RunScope) -> otel_context.Context:
    """The context of the run's current step, its span opened by the step's first call."""
    assert tracer is not None
    step = scope.run.step
    if scope.step_context is None or scope.step_span_number != step:
        if scope.step_span is not None:
            scope.step_span.end()
        scope.step_span = tracer.start_span(
            f"step {step}", context=scope.span_context, attributes={"agent.step": step}
        )
        scope.step_span_number = step
        scope.step_context = trace.set_span_in_context(scope.step_span)
    return scope.step_context


def start_call(scope: RunScope | None, name: str, attributes: dict[str, str | int]) -> Span:
    """A span for a call of the current step (model, tool or delegation), not made current."""
    assert tracer is not None
    parent = step_context(scope) if scope is not None and scope.span_context is not None else None
    return tracer.start_span(name, context=parent, attributes=attributes)


def end_call(span: Span, outcome: str, error: str | None = None) -> None:
    """Close a call's span with its outcome."""
    span.set_attribute("agent.outcome", outcome)
    if outcome == "error":
        span.set_status(Status(StatusCode.ERROR, error))
    span.end()


def attach(span: Span) -> object:
    """Make `span` current (a tool's own spans nest under it); the token for `detach`."""
    return otel_context.attach(trace.set_span_in_context(span))


def detach(token: object) -> None:
    """Undo `attach`."""
    otel_context.detach(token)  # type: ignore[arg-type]


# -- propagation ----------------------------------------------------------------------------------


def trace_headers() -> dict[str, str]:
    """The W3C trace context (`traceparent`, `tracestate`) of the current span, for a request to
    another agent server; empty while tracing is off."""
    if tracer is None:
        return {}
    headers: dict[str, str] = {}
    propagate.inject(headers)
    return headers


class TraceContextMiddleware:
    """Continues the caller's trace: a request's W3C `traceparent` becomes the current context
    while it is handled, so a run `/start` or `/resume` begins is a child of the caller's span
    (its task copies the context). Installed only while tracing is on."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or tracer is None:
            await self.app(scope, receive, send)
            return
        carrier = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in scope["headers"]
            if name in (b"traceparent", b"tracestate")
        }
        if "traceparent" not in carrier:
            await self.app(scope, receive, send)
            return
        token = otel_context.attach(propagate.extract(carrier))
        try:
            await self.app(scope, receive, send)
        finally:
            otel_context.detach(token)
