"""One trace across two real servers: the parent's run, step and delegation, then the remote
server's run under that delegation, found through the `traceparent` the transport sent."""

from __future__ import annotations

from pathlib import Path

import httpx
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from app import AgentRegistry, HttpRemoteAgentTransport
from app.observability import tracing
from app.settings import Settings
from tests.api.conftest import read_stream, serve
from tests.api.test_remote import orchestrator, researcher
from tests.databases import database_url
from tests.ops.conftest import JsonLines, by_name
from tests.runtime.agents import Calls


async def test_a_tree_across_two_servers_is_one_trace(
    tmp_path: Path, spans: InMemorySpanExporter, json_logs: JsonLines
) -> None:
    remote_calls, calls = Calls(), Calls()
    async with (
        database_url("sqlite", tmp_path / "remote") as remote_url,
        database_url("sqlite", tmp_path / "parent") as parent_url,
        serve(
            AgentRegistry([researcher(remote_calls)]),
            remote_calls,
            Settings(database_url=remote_url),
        ) as remote,
    ):
        transport = HttpRemoteAgentTransport(remote.url)
        async with (
            serve(
                AgentRegistry([orchestrator(transport)]), calls, Settings(database_url=parent_url)
            ) as parent,
            httpx.AsyncClient(base_url=parent.url) as client,
        ):
            started = await client.post(
                "/start", json={"agentType": "orchestrator", "message": "go", "sessionId": "o"}
            )
            assert started.status_code == 201
            read = await read_stream(client, "o")
        await transport.aclose()
    assert read.end == {"status": "completed"}

    named = by_name(spans.get_finished_spans())
    [parent_run] = named["run orchestrator"]
    [remote_run] = named["run researcher"]
    [delegation] = named["delegate researcher"]
    trace_id = parent_run.context.trace_id
    assert {span.context.trace_id for spans_ in named.values() for span in spans_} == {trace_id}
    # parent run > step 1 > delegate researcher > (the other server) run researcher
    parent_steps = {s.context.span_id: s for s in named["step 1"] if s.parent == parent_run.context}
    assert delegation.parent is not None
    assert delegation.parent.span_id in parent_steps
    assert remote_run.parent is not None
    assert remote_run.parent.span_id == delegation.context.span_id
    assert remote_run.parent.is_remote
    # the remote run's own steps, model calls and tool calls nest under it
    remote_steps = [s for s in named["step 1"] + named["step 2"] if s.parent == remote_run.context]
    assert len(remote_steps) == 2
    step_ids = {s.context.span_id for s in remote_steps}
    tools = named["tool search"]
    assert len(tools) == 2
    assert all(t.parent is not None and t.parent.span_id in step_ids for t in tools)
    models = named["model researcher"]
    assert len(models) == 3
    assert all(
        m.parent is not None
        and m.parent.span_id in step_ids | {s.context.span_id for s in named.get("step 3", [])}
        for m in models
    )
    assert remote_run.attributes is not None
    assert remote_run.attributes["agent.status"] == "completed"
    assert remote_run.attributes["agent.session_id"] == "o-remote-r1"
    assert parent_run.attributes is not None
    assert parent_run.attributes["agent.status"] == "completed"

    # Every log line about either run carries the one trace id.
    hex_trace = format(trace_id, "032x")
    for session_id in ("o", "o-remote-r1"):
        lines = json_logs.about(session_id)
        assert [line["message"] for line in lines if line["logger"] == "app.runs"] == [
            "Run started",
            "Run ended",
        ]
        assert {line["trace_id"] for line in lines} == {hex_trace}


def test_tracing_is_off_unless_the_environment_asks() -> None:
    assert not tracing.wanted({})
    assert not tracing.wanted({"OTEL_SERVICE_NAME": "agents"})
    assert not tracing.wanted(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}
    )
    assert not tracing.wanted({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "x"})
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"})
    assert tracing.wanted({"OTEL_TRACES_EXPORTER": "console"})
    assert tracing.tracer is None
    assert tracing.trace_headers() == {}
