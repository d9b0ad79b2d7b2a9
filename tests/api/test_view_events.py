"""The AI SDK and AG-UI views send exactly what the OpenAPI document says of their events: every
event of every kind of run fits the route's `itemSchema` and its `data` the union's schema, and
every member of each union is sent by some run (so the document describes no event that never
comes)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import jsonschema_rs
import orjson
import pytest

from app.api import create_app
from app.demo import build_registry
from app.protocol import (
    BaseChunk,
    ErrorChunk,
    InterruptedChunk,
    OutputChunk,
    StepRedoChunk,
    SubagentEndChunk,
    SubagentStartChunk,
    TextDeltaChunk,
    ToolEndChunk,
    ToolPendingChunk,
    ToolStartChunk,
    chunk_to_json,
)
from app.protocol.ag_ui import AgUiView
from app.protocol.ai_sdk import DONE, UIMessageView
from app.settings import Settings

DOCUMENT: dict[str, Any] = create_app(
    build_registry(latency=0), settings=Settings(database_url="memory://")
).openapi()
SCHEMAS: dict[str, Any] = DOCUMENT["components"]["schemas"]
ROOT = "r"
CHILD = "r-sub-c1"
OTHER = "r-sub-c2"
GRANDCHILD = "r-sub-c1-sub-g"


def item_schema(path: str, method: str = "get") -> Any:
    """A validator of one SSE message of the route's 200 answer."""
    answer = DOCUMENT["paths"][path][method]["responses"]["200"]
    schema = answer["content"]["text/event-stream"]["itemSchema"]
    return jsonschema_rs.Draft202012Validator({**schema, "components": DOCUMENT["components"]})


def component(name: str) -> Any:
    ref = {"$ref": f"#/components/schemas/{name}"}
    return jsonschema_rs.Draft202012Validator({**ref, "components": DOCUMENT["components"]})


def chunks(*made: BaseChunk) -> list[dict[str, Any]]:
    """The chunks as the views read them (stored JSON), numbered from 1."""
    numbered = [chunk.replaced({"sequence": i}) for i, chunk in enumerate(made, 1)]
    return [orjson.loads(chunk_to_json(chunk)) for chunk in numbered]


def common(agent: str, step: int) -> dict[str, Any]:
    agent_type = {ROOT: "boss", CHILD: "mid", OTHER: "mid", GRANDCHILD: "leaf"}[agent]
    return {
        "sequence": 0,
        "agent_id": agent,
        "agent_type": agent_type,
        "step": step,
        "timestamp": 1,
    }


def text(agent: str, step: int, delta: str) -> TextDeltaChunk:
    return TextDeltaChunk(**common(agent, step), delta=delta)


def call(agent: str, step: int, call_id: str, arguments: dict[str, Any] | str) -> ToolStartChunk:
    return ToolStartChunk(
        **common(agent, step), tool_call_id=call_id, tool_name="t", arguments=arguments
    )


def ended(agent: str, step: int, call_id: str, **outcome: Any) -> ToolEndChunk:
    return ToolEndChunk(**common(agent, step), tool_call_id=call_id, tool_name="t", **outcome)


def pending(agent: str, step: int, call_id: str, reason: str) -> ToolPendingChunk:
    return ToolPendingChunk(
        **common(agent, step), tool_call_id=call_id, tool_name="t", arguments={}, reason=reason
    )


def redo(agent: str, step: int, reason: str) -> StepRedoChunk:
    return StepRedoChunk(**common(agent, step), reason=reason)


def child_start(parent: str, step: int, child: str, call_id: str) -> SubagentStartChunk:
    return SubagentStartChunk(
        **common(parent, step), sub_agent_type="mid", sub_session_id=child, call_id=call_id
    )


def child_end(parent: str, step: int, child: str, call_id: str, result: Any) -> SubagentEndChunk:
    return SubagentEndChunk(
        **common(parent, step),
        sub_agent_type="mid",
        sub_session_id=child,
        call_id=call_id,
        result=result,
    )


def tree_run() -> list[dict[str, Any]]:
    """A root that writes (its step redone once), delegates to a child (which writes, has its
    step redone, calls tools, has a grandchild, and finishes) and to another child that fails,
    calls tools of its own, and then pauses."""
    return chunks(
        text(ROOT, 1, "Let me"),
        redo(ROOT, 1, "model_retry"),
        text(ROOT, 1, "Let me ask. "),
        call(ROOT, 1, "c1", {"message": "one"}),
        child_start(ROOT, 1, CHILD, "c1"),
        text(CHILD, 1, "chi"),
        redo(CHILD, 1, "takeover"),
        text(CHILD, 1, "child text"),
        call(CHILD, 1, "k", {"q": 1}),
        ended(CHILD, 1, "k", result={"found": [1, 2]}),
        call(CHILD, 1, "bad", "not json"),
        ended(CHILD, 1, "bad", error="it broke"),
        child_start(CHILD, 1, GRANDCHILD, "g"),
        text(GRANDCHILD, 1, "deep"),
        OutputChunk(**common(GRANDCHILD, 1), output={"answer": "leaf"}),
        child_end(CHILD, 1, GRANDCHILD, "g", {"answer": "leaf"}),
        pending(CHILD, 2, "ask", "client"),
        ended(CHILD, 2, "ask", result="Oslo"),
        OutputChunk(**common(CHILD, 2), output={"answer": "mid"}),
        child_end(ROOT, 1, CHILD, "c1", {"answer": "mid"}),
        ended(ROOT, 1, "c1", result={"answer": "mid"}),
        call(ROOT, 2, "c2", "raw"),
        child_start(ROOT, 2, OTHER, "c2"),
        ErrorChunk(**common(OTHER, 1), error="child failed"),
        child_end(ROOT, 2, OTHER, "c2", {"success": False, "error": "child failed"}),
        ended(ROOT, 2, "c2", error="child failed"),
        call(ROOT, 3, "q", {"question": "Which city?"}),
        pending(ROOT, 3, "q", "client"),
        call(ROOT, 3, "p", {"amount": 5}),
        pending(ROOT, 3, "p", "approval"),
    )


def ending_runs() -> dict[str, list[dict[str, Any]]]:
    """Runs that end each way a run ends, by their final status."""
    child_paused = chunks(
        call(ROOT, 1, "c1", {"message": "one"}),
        child_start(ROOT, 1, CHILD, "c1"),
        text(CHILD, 1, "asking"),
        call(CHILD, 1, "ask", {"question": "?"}),
        pending(CHILD, 1, "ask", "client"),
    )
    return {
        "completed": chunks(
            text(ROOT, 1, "done"), OutputChunk(**common(ROOT, 1), output={"score": 3})
        ),
        "completed in text": chunks(
            text(ROOT, 1, "done"), OutputChunk(**common(ROOT, 1), output="done")
        ),
        "failed": chunks(text(ROOT, 1, "oh"), ErrorChunk(**common(ROOT, 1), error="Boom")),
        "interrupted": chunks(
            text(ROOT, 1, "wait"), InterruptedChunk(**common(ROOT, 1), reason="stop")
        ),
        "terminated": chunks(text(ROOT, 1, "gone")),
        "paused_awaiting_client": tree_run(),
        "paused in a child": child_paused,
    }


def status_of(name: str) -> str:
    return {
        "completed in text": "completed",
        "paused in a child": "paused_awaiting_client",
    }.get(name, name)


def ai_sdk_events(run: Sequence[dict[str, Any]], status: str, after: int) -> list[Any]:
    view = UIMessageView(ROOT, message_id=f"{ROOT}-{after}")
    view.replay(list(run[:after]))
    rest = list(run[after:])
    return [*view.opening(), *view.page(rest[:3]), *view.page(rest[3:]), *view.closing(status)]


def ag_ui_events(run: Sequence[dict[str, Any]], status: str, after: int) -> list[Any]:
    view = AgUiView(ROOT, "boss", thread_id=ROOT, run_id=f"{ROOT}-{after}")
    view.replay(list(run[:after]))
    rest = list(run[after:])
    return [*view.opening(), *view.page(rest[:3]), *view.page(rest[3:]), *view.closing(status)]


def union_types(name: str) -> set[str]:
    members = SCHEMAS[name]["discriminator"]["mapping"]
    assert {
        SCHEMAS[ref.rsplit("/", 1)[1]]["properties"]["type"]["const"] for ref in members.values()
    } == set(members)
    return set(members)


@pytest.mark.parametrize("after", [0, 4, 13])
def test_every_ai_sdk_part_fits_the_document(after: int) -> None:
    message = item_schema("/stream/{stream_id}/ai-sdk")
    part = component("AiSdk.UIPart")
    seen = set()
    for name, run in ending_runs().items():
        for event in ai_sdk_events(run, status_of(name), after):
            data = json.dumps(event)
            assert message.is_valid({"event": "message", "data": data}), (name, event)
            assert part.is_valid(event), (name, event)
            seen.add(event["type"])
    assert message.is_valid({"event": "message", "data": DONE})
    assert not part.is_valid({"type": "start", "messageId": 1})
    if after == 0:
        assert seen == union_types("AiSdk.UIPart")


@pytest.mark.parametrize("after", [0, 4, 13])
def test_every_ag_ui_event_fits_the_document(after: int) -> None:
    message = item_schema("/stream/{stream_id}/ag-ui")
    event_schema = component("AgUi.Event")
    seen = set()
    for name, run in ending_runs().items():
        for event in ag_ui_events(run, status_of(name), after):
            assert message.is_valid({"event": "message", "data": json.dumps(event)}), event
            assert event_schema.is_valid(event), (name, event)
            seen.add(event["type"])
    if after == 0:
        assert seen == union_types("AgUi.Event")


def test_optional_fields_are_absent_never_null() -> None:
    finished = component("AgUi.RunFinished")
    assert finished.is_valid(
        {"type": "RUN_FINISHED", "threadId": "t", "runId": "r", "outcome": {"type": "success"}}
    )
    for absent in ("result", "metadata"):
        event = {"type": "RUN_FINISHED", "threadId": "t", "runId": "r", absent: None}
        assert not finished.is_valid({**event, "outcome": {"type": "success"}}), absent
    step = component("AgUi.StepStarted")
    assert not step.is_valid({"type": "STEP_STARTED", "stepName": "step-1", "subagentRunId": None})
    assert not step.is_valid({"type": "STEP_STARTED", "stepName": "step-1", "extra": 1})


def test_each_chat_route_documents_its_view() -> None:
    ai_sdk = {"/stream/{stream_id}/ai-sdk", "/ai-sdk/chat", "/ai-sdk/chat/{chat_id}/stream"}
    for path, item in DOCUMENT["paths"].items():
        for method, operation in item.items():
            content = operation["responses"].get("200", {}).get("content", {})
            if "text/event-stream" not in content:
                continue
            schema = content["text/event-stream"]["itemSchema"]
            if path in ai_sdk:
                assert schema["oneOf"][0]["properties"]["data"]["contentSchema"] == {
                    "$ref": "#/components/schemas/AiSdk.UIPart"
                }, (path, method)
                header = operation["responses"]["200"]["headers"]["x-vercel-ai-ui-message-stream"]
                assert header["schema"] == {"const": "v1"}
            elif path.endswith("ag-ui") or path.startswith("/ag-ui"):
                assert schema["properties"]["data"]["contentSchema"] == {
                    "$ref": "#/components/schemas/AgUi.Event"
                }, (path, method)
            else:
                assert path == "/stream/{stream_id}", path


def test_a_redone_step_voids_its_earlier_text_in_both_views() -> None:
    run = tree_run()[:9]
    parts = ai_sdk_events(run, "interrupted", 0)
    kinds = [part["type"] for part in parts]
    redo_at = kinds.index("data-redo")
    assert kinds[redo_at - 4 : redo_at + 2] == [
        "text-delta",
        "text-end",
        "finish-step",
        "start-step",
        "data-redo",
        "text-start",
    ]
    assert parts[redo_at]["data"] == {
        "sessionId": ROOT,
        "step": 1,
        "reason": "model_retry",
        "textIds": [f"{ROOT}:1"],
    }
    agents = [part["data"] for part in parts if part["type"] == "data-agent"]
    assert agents[-1]["text"] == "child text"

    events = ag_ui_events(run, "interrupted", 0)
    redos = [event for event in events if event["type"] == "CUSTOM"]
    assert [(e.get("subagentRunId"), e["value"]) for e in redos] == [
        (None, {"stepName": "step-1", "reason": "model_retry", "messageIds": [f"{ROOT}:1"]}),
        (CHILD, {"stepName": "step-1", "reason": "takeover", "messageIds": [f"{CHILD}:6"]}),
    ]
    root_events = [e["type"] for e in events if "subagentRunId" not in e][:8]
    assert root_events[2:8] == [
        "STEP_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "STEP_FINISHED",
        "CUSTOM",
    ]
