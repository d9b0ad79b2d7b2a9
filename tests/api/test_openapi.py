"""The OpenAPI document says what the server accepts and answers (issue 18, case 4): checked
against the document itself and against a server running the demo agents."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema_rs
import pytest

from app.api import create_app
from app.api.middleware import PUBLIC_PATHS
from app.demo import build_registry
from app.protocol.values import SESSION_ID_PATTERN
from app.settings import Settings
from tests.api.conftest import serve
from tests.runtime.agents import Calls

REGISTRY = build_registry(latency=0)
DOCUMENT: dict[str, Any] = create_app(
    REGISTRY, settings=Settings(database_url="memory://")
).openapi()
SCHEMAS = DOCUMENT["components"]["schemas"]
START = DOCUMENT["paths"]["/start"]["post"]["requestBody"]["content"]["application/json"]


def validator(schema: dict[str, Any]) -> Any:
    """A JSON Schema validator for `schema`, whose `$ref`s point into the document."""
    return jsonschema_rs.Draft202012Validator({**schema, "components": DOCUMENT["components"]})


def operations() -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path, method, operation)
        for path, item in DOCUMENT["paths"].items()
        for method, operation in item.items()
    ]


@pytest.fixture
async def demo(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path}/demo.db")
    async with (
        serve(build_registry(latency=0), Calls(), settings) as server,
        httpx.AsyncClient(base_url=server.url, timeout=10) as client,
    ):
        yield client


def test_no_parameter_is_declared_nullable() -> None:
    for path, method, operation in operations():
        for parameter in operation.get("parameters", ()):
            spelled = json.dumps(parameter["schema"])
            assert '"null"' not in spelled, (path, method, parameter)


def test_a_start_body_needs_a_message_or_an_input() -> None:
    body = validator(START["schema"])
    assert not body.is_valid({"agentType": "text-analyst"})
    assert not body.is_valid({"agentType": "text-analyst", "message": None, "input": None})
    assert body.is_valid({"agentType": "text-analyst", "message": "hi"})
    assert body.is_valid({"agentType": "text-analyst", "input": {}})


async def test_the_server_refuses_what_the_document_refuses(demo: httpx.AsyncClient) -> None:
    body = validator(START["schema"])
    refused = [
        {"agentType": "text-analyst"},
        {"agentType": "text-analyst", "message": None, "input": None},
        {"agent_type": "text-analyst", "message": "hi"},
        {"agentType": "text-analyst", "message": "hi", "session_id": "s"},
        {"agentType": "keywords", "input": {"text": "?!"}},
        {"agentType": "keywords", "input": {"text": 5}},
    ]
    for request in refused:
        assert not body.is_valid(request), request
        assert (await demo.post("/start", json=request)).status_code == 422, request
    resume = validator(SCHEMAS["ResumeRequest"])
    assert not resume.is_valid({"tool_results": []})
    assert (await demo.post("/resume/x", json={"tool_results": []})).status_code == 422


def test_session_ids_carry_their_pattern() -> None:
    start = SCHEMAS["StartRequest"]
    assert start["additionalProperties"] is False
    for field in ("sessionId", "parentSessionId"):
        assert start["properties"][field]["anyOf"][0]["pattern"] == SESSION_ID_PATTERN
    paths = [
        (path, parameter["schema"]["pattern"])
        for path, _method, operation in operations()
        for parameter in operation.get("parameters", ())
        if parameter["in"] == "path" and parameter["name"] != "agent_type"
    ]
    assert paths
    assert {pattern for _path, pattern in paths} == {SESSION_ID_PATTERN}
    for name in ("StartRequest", "ResumeRequest", "InterruptRequest", "ToolResultBody"):
        assert SCHEMAS[name]["additionalProperties"] is False, name


def test_the_stream_is_described_per_event() -> None:
    answer = DOCUMENT["paths"]["/stream/{stream_id}"]["get"]["responses"]["200"]
    chunk_event, end_event = answer["content"]["text/event-stream"]["itemSchema"]["oneOf"]
    assert chunk_event["properties"]["data"]["contentSchema"] == {
        "$ref": "#/components/schemas/Chunk"
    }
    assert end_event["properties"]["event"]["const"] == "end"
    assert end_event["properties"]["data"]["contentSchema"] == {
        "$ref": "#/components/schemas/StreamEnd"
    }
    assert set(SCHEMAS["StreamEnd"]["required"]) == {"status"}
    assert len(SCHEMAS["Chunk"]["oneOf"]) == 10


async def test_a_real_stream_fits_its_description(demo: httpx.AsyncClient) -> None:
    await demo.post("/start", json={"agentType": "keywords", "input": {"text": "red red sky"}})
    started = await demo.post("/start", json={"agentType": "text-analyst", "message": "a b c"})
    text = (await demo.get(f"/stream/{started.json()['sessionId']}")).text
    answer = DOCUMENT["paths"]["/stream/{stream_id}"]["get"]["responses"]["200"]
    event = validator(answer["content"]["text/event-stream"]["itemSchema"])
    chunk = validator({"$ref": "#/components/schemas/Chunk"})
    messages = [block for block in text.split("\r\n\r\n") if "data:" in block]
    for block in messages:
        fields = dict(line.split(": ", 1) for line in block.split("\r\n") if ": " in line)
        parsed = {"event": fields.get("event", "message"), "data": fields["data"]}
        if "id" in fields:
            parsed["id"] = fields["id"]
        assert event.is_valid(parsed), block
        if parsed["event"] == "message":
            assert chunk.is_valid(json.loads(fields["data"])), block
    assert "\r\nevent: end\r\n" in messages[-1]


def test_every_field_says_what_it_is() -> None:
    undescribed = [
        f"{name}.{field}"
        for name, schema in SCHEMAS.items()
        for field, spec in schema.get("properties", {}).items()
        if not spec.get("description")
    ]
    undescribed += [
        f"{path} {parameter['name']}"
        for path, _method, operation in operations()
        for parameter in operation.get("parameters", ())
        if not parameter.get("description")
    ]
    assert undescribed == []
    assert all(schema.get("description") for schema in SCHEMAS.values())


async def test_the_examples_start_the_demo_agents(demo: httpx.AsyncClient) -> None:
    names = {agent.name for agent in REGISTRY}
    examples = START["examples"]
    assert {example["value"]["agentType"] for example in examples.values()} == names
    body = validator(START["schema"])
    for example in examples.values():
        assert body.is_valid(example["value"]), example
        answer = await demo.post("/start", json=example["value"])
        assert answer.status_code == 201, answer.text


def test_start_documents_each_agent_with_its_input() -> None:
    mapping = START["schema"]["discriminator"]["mapping"]
    assert set(mapping) == {agent.name for agent in REGISTRY}
    keywords = validator(START["schema"])
    assert keywords.is_valid({"agentType": "keywords", "input": {"text": "hi"}})
    assert not keywords.is_valid({"agentType": "keywords", "input": {"words": "hi"}})
    assert not keywords.is_valid({"agentType": "nobody", "message": "hi"})


def test_401_is_documented_where_a_key_is_required_and_only_there() -> None:
    for path, method, operation in operations():
        assert "401" not in operation["responses"], (path, method)
    settings = Settings(database_url="memory://", api_key="key")
    keyed = create_app(REGISTRY, settings=settings).openapi()
    for path, item in keyed["paths"].items():
        for method, operation in item.items():
            assert ("401" in operation["responses"]) == (path not in PUBLIC_PATHS), path
            if "401" in operation["responses"]:
                said = operation["responses"]["401"]["description"]
                opened = method == "get" and path.startswith("/stream/{stream_id}")
                assert ("stream token" in said) == opened, (path, method)


def test_every_operation_but_liveness_and_metrics_documents_503() -> None:
    """Neither reads the store: they answer whatever it does."""
    undocumented = [
        (path, method) for path, method, op in operations() if "503" not in op["responses"]
    ]
    assert undocumented == [("/healthz", "get"), ("/metrics", "get")]


def test_the_chat_endpoints_name_the_agents() -> None:
    names = sorted(agent.name for agent in REGISTRY)
    chat = DOCUMENT["paths"]["/ai-sdk/chat"]["post"]["requestBody"]["content"]["application/json"]
    body = validator(chat["schema"])
    example = next(iter(chat["examples"].values()))["value"]
    assert body.is_valid(example)
    assert not body.is_valid({**example, "agentType": "nobody"})
    assert not body.is_valid({k: v for k, v in example.items() if k != "agentType"})
    (agent_type,) = DOCUMENT["paths"]["/ag-ui/{agent_type}"]["post"]["parameters"]
    assert sorted(agent_type["schema"]["enum"]) == names
    assert SCHEMAS["ChatRequest"]["required"] == ["id", "messages", "agentType"]
    run = validator(SCHEMAS["RunAgentInput"])
    thread = {"threadId": "t", "runId": "r", "messages": []}
    for accepted in (0, 3.0, 9 * 10**18, None):
        assert run.is_valid({**thread, "forwardedProps": {"fromSequence": accepted}}), accepted
    for refused in (-1, 2.5, True, "3", 9 * 10**18 + 1024):
        assert not run.is_valid({**thread, "forwardedProps": {"fromSequence": refused}}), refused


async def test_the_chat_examples_run_the_demo_agents(demo: httpx.AsyncClient) -> None:
    chat = DOCUMENT["paths"]["/ai-sdk/chat"]["post"]["requestBody"]["content"]["application/json"]
    # Every agent that runs on a message has one; the two that take a structured input do not.
    assert {e["value"]["agentType"] for e in chat["examples"].values()} == {
        agent.name for agent in REGISTRY
    } - {"itinerary", "booker"}
    for example in chat["examples"].values():
        answer = await demo.post("/ai-sdk/chat", json=example["value"])
        assert answer.status_code == 200, answer.text
        assert answer.text.endswith(
            'data: {"type":"finish","finishReason":"stop"}\n\ndata: [DONE]\n\n'
        )
    run = DOCUMENT["paths"]["/ag-ui/{agent_type}"]["post"]["requestBody"]["content"]
    for example in run["application/json"]["examples"].values():
        answer = await demo.post("/ag-ui/keywords", json=example["value"])
        assert answer.status_code == 200, answer.text
        assert '"type":"RUN_FINISHED"' in answer.text.rsplit("data: ", 1)[1]
