"""Observability: structured logs, Prometheus metrics and OpenTelemetry traces, behind one seam.

The runtime, the store and the API call the hooks re-exported here (see `hooks` for the table
of hooks and call sites); `logs`, `metrics` and `tracing` hold the machinery and its set-up.
"""

from app.observability.hooks import (
    chunks_sent,
    delegation,
    model_call,
    observe_run,
    remote_reconnect,
    scheduler_queue_length,
    sse_client,
    takeover,
    timed_commit,
    tool_call,
    trace_headers,
)

__all__ = [
    "chunks_sent",
    "delegation",
    "model_call",
    "observe_run",
    "remote_reconnect",
    "scheduler_queue_length",
    "sse_client",
    "takeover",
    "timed_commit",
    "tool_call",
    "trace_headers",
]
