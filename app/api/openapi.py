"""The OpenAPI document: FastAPI's, from the models the routes validate with, completed with what
FastAPI cannot see.

- The streams' events, which no JSON route returns: the chunk types and `end`, the AI SDK UI
  message stream's parts and AG-UI's events (from the types the views build).
- `POST /start` per agent: the registry's agents, each with the input schema `/start` checks
  its `input` against (the one `GET /agents` publishes, else its state schema's fields), so a
  client or a fuzzer that follows the document names real agents with inputs they take. The
  chat endpoints name the same agents, with an example turn each.
- Parameters that are absent or present, never null (FastAPI writes `anyOf [..., null]` for an
  optional header or query parameter, which HTTP cannot send).
- The bearer key, when the server has one (and the stream token where it opens a stream).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ValidationError

from app.agents import AgentConfig, AgentRegistry
from app.agents.subagent import MESSAGE_FIELDS
from app.api.middleware import PUBLIC_PATHS, STREAM_PATH
from app.api.routes.protocols import AG_UI_EVENT_SCHEMA, AI_SDK_PART_SCHEMA
from app.protocol import CHUNK_ADAPTER
from app.protocol.ag_ui_events import AG_UI_EVENT_ADAPTER
from app.protocol.ai_sdk_parts import UI_PART_ADAPTER
from app.protocol.api import ErrorBody, StreamEnd
from app.protocol.ui_requests import ChatRequest
from app.protocol.values import JSON_VALUE_SCHEMA, NO_NUL_PATTERN

SCHEMAS = "#/components/schemas/"
EXAMPLE_TEXT = "The garden is beautiful in spring. The old fence is broken."
"""What the examples of `POST /start` send."""
MAX_EXAMPLE_AGENTS = 16
"""Agents given an example each (the demo's all have one); a large registry stops there, so the
document stays readable."""

_JSON_OBJECT: dict[str, Any] = {
    "type": "object",
    "propertyNames": {"pattern": NO_NUL_PATTERN},
    "additionalProperties": {"$ref": SCHEMAS + "JsonValue"},
}


def install_openapi(app: FastAPI, registry: AgentRegistry, *, bearer: bool) -> None:
    """Serve the completed document (built once, on first use)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build_document(app, registry, bearer=bearer)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def build_document(app: FastAPI, registry: AgentRegistry, *, bearer: bool) -> dict[str, Any]:
    """The API's OpenAPI document for `registry`; `bearer` when every route but the health
    checks needs `Authorization: Bearer <key>`."""
    document = get_openapi(
        title=app.title, version=app.version, description=app.description, routes=app.routes
    )
    components: dict[str, Any] = document.setdefault("components", {}).setdefault("schemas", {})
    chunk = CHUNK_ADAPTER.json_schema(by_alias=True, ref_template=SCHEMAS + "{model}")
    components.update(chunk.pop("$defs", {}))
    chunk["description"] = "A stream chunk, one of the types `type` names."
    components["Chunk"] = chunk
    components["StreamEnd"] = StreamEnd.model_json_schema(ref_template=SCHEMAS + "{model}")
    components["JsonValue"] = JSON_VALUE_SCHEMA
    _add_union(
        components,
        AI_SDK_PART_SCHEMA,
        UI_PART_ADAPTER.json_schema(ref_template=SCHEMAS + "AiSdk.{model}"),
        "A part of the AI SDK UI message stream (protocol v1), one of the types `type` names.",
    )
    _add_union(
        components,
        AG_UI_EVENT_SCHEMA,
        AG_UI_EVENT_ADAPTER.json_schema(ref_template=SCHEMAS + "AgUi.{model}"),
        "An AG-UI event (protocol 1.0), one of the types `type` names.",
    )
    for path_item in document["paths"].values():
        for operation in path_item.values():
            for parameter in operation.get("parameters", ()):
                parameter["schema"] = _not_null(parameter["schema"])
    paths = document["paths"]
    _describe_start(paths["/start"]["post"], components, registry)
    _describe_chats(
        paths["/ai-sdk/chat"]["post"], paths["/ag-ui/{agent_type}"]["post"], components, registry
    )
    if bearer:
        _require_bearer(document)
    return document


def _add_union(
    components: dict[str, Any], name: str, schema: dict[str, Any], description: str
) -> None:
    """`schema` (a union's, with its members in `$defs`) as the component `name`; its members
    beside it, in the component's namespace (`AiSdk.`, `AgUi.`)."""
    namespace = name.split(".")[0]
    for member, definition in schema.pop("$defs", {}).items():
        components[f"{namespace}.{member}"] = definition
    components[name] = {**schema, "description": description}


def _not_null(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` without its `null` alternative: an absent parameter is how HTTP says None."""
    branches = schema.get("anyOf")
    if branches is None:
        return schema
    kept = [branch for branch in branches if branch.get("type") != "null"]
    rest = {key: value for key, value in schema.items() if key != "anyOf"}
    return {**kept[0], **rest} if len(kept) == 1 else {**rest, "anyOf": kept}


def _describe_start(
    operation: dict[str, Any], components: dict[str, Any], registry: AgentRegistry
) -> None:
    variants = {}
    for agent in registry:
        name = f"StartRequest.{agent.name}"
        components[name] = {
            "title": name,
            "description": f"`POST /start` for `{agent.name}`: {agent.description}".strip(),
            "allOf": [{"$ref": SCHEMAS + "StartRequest"}],
            "properties": {
                "agentType": {"const": agent.name, "description": "This agent."},
                "input": {
                    "anyOf": [_input_schema(agent, registry, components), {"type": "null"}],
                    "description": "What this agent takes as input (as `GET /agents` shows).",
                },
            },
        }
        variants[agent.name] = SCHEMAS + name
    content = operation["requestBody"]["content"]["application/json"]
    content["schema"] = {
        "oneOf": [{"$ref": ref} for ref in variants.values()],
        "discriminator": {"propertyName": "agentType", "mapping": variants},
    }
    content["examples"] = _examples(registry)


def _describe_chats(
    ai_sdk: dict[str, Any],
    ag_ui: dict[str, Any],
    components: dict[str, Any],
    registry: AgentRegistry,
) -> None:
    """Name the registry's agents where the chat endpoints take one, and give an example turn
    per agent: a new chat (thread) with a user message."""
    names = [agent.name for agent in registry]
    # A chat sends text: an example each for the agents that run on a message.
    talkers = [name for name in names if _runs_on_text(registry, name)]
    chat = ai_sdk["requestBody"]["content"]["application/json"]
    assert chat["schema"] == {"$ref": SCHEMAS + ChatRequest.__name__}
    components[ChatRequest.__name__]["properties"]["agentType"]["enum"] = names
    chat["examples"] = {
        name: {
            "summary": f"A new chat with {name}",
            "value": {
                "id": f"chat-{index}",
                "agentType": name,
                "messages": [
                    {"id": "m1", "role": "user", "parts": [{"type": "text", "text": EXAMPLE_TEXT}]}
                ],
                "trigger": "submit-message",
            },
        }
        for index, name in enumerate(talkers[:MAX_EXAMPLE_AGENTS])
    }
    (agent_type,) = [p for p in ag_ui["parameters"] if p["name"] == "agent_type"]
    agent_type["schema"] = {**agent_type["schema"], "enum": names}
    run = ag_ui["requestBody"]["content"]["application/json"]
    run["examples"] = {
        "a new thread": {
            "summary": "A new thread (run the agent the path names)",
            "value": {
                "threadId": "thread-1",
                "runId": "run-1",
                "messages": [{"id": "m1", "role": "user", "content": EXAMPLE_TEXT}],
            },
        }
    }


def _input_schema(
    agent: AgentConfig, registry: AgentRegistry, components: dict[str, Any]
) -> dict[str, Any]:
    """What `/start` takes as `input` for `agent`: a JSON object that fits its published input
    schema, else whose fields named in its state schema fit those (see `seed_state`)."""
    model = registry.input_schema(agent.name) or agent.state_schema
    if model is None:
        return _JSON_OBJECT
    name = f"Input.{agent.name}"
    schema = model.model_json_schema(ref_template=SCHEMAS + name + ".{model}")
    for nested, definition in schema.pop("$defs", {}).items():
        components[f"{name}.{nested}"] = definition
    if model is agent.state_schema:
        # Only the fields given are checked, and other fields are free.
        schema = {
            "title": f"{model.__name__} fields",
            "type": "object",
            "properties": schema.get("properties", {}),
        }
    components[name] = schema
    return {"allOf": [_JSON_OBJECT, {"$ref": SCHEMAS + name}]}


def _examples(registry: AgentRegistry) -> dict[str, Any]:
    """Requests that start the registry's agents, as "Try it out" sends them."""
    examples: dict[str, Any] = {}
    for agent in list(registry)[:MAX_EXAMPLE_AGENTS]:
        value: dict[str, Any] = {"agentType": agent.name, "message": EXAMPLE_TEXT}
        model = registry.input_schema(agent.name)
        if model is not None:
            fitting = _fitting_input(model)
            if fitting is None:
                continue
            value = {"agentType": agent.name, "input": fitting}
        examples[agent.name] = {"summary": f"Start {agent.name}", "value": value}
    if examples:
        first = next(iter(examples.values()))["value"]
        examples["with an id"] = {
            "summary": "Start with a chosen session id (then follow /stream/example-1)",
            "value": {**first, "sessionId": "example-1"},
        }
    return examples


def _runs_on_text(registry: AgentRegistry, name: str) -> bool:
    """Whether the agent runs on a plain message (no input schema, or one a text fills)."""
    model = registry.input_schema(name)
    return model is None or any(_fits({field: EXAMPLE_TEXT}, model) for field in MESSAGE_FIELDS)


def _fits(value: dict[str, Any], model: type[BaseModel]) -> bool:
    try:
        model.model_validate(value)
    except ValidationError:
        return False
    return True


def _fitting_input(model: type[BaseModel]) -> dict[str, Any] | None:
    """An input `model` takes: the first example its schema gives, else the example text in
    the first message field it has."""
    for example in model.model_json_schema().get("examples", []):
        try:
            model.model_validate(example)
        except ValidationError:
            continue
        return dict(example)
    for field in MESSAGE_FIELDS:
        candidate = {field: EXAMPLE_TEXT}
        try:
            model.model_validate(candidate)
        except ValidationError:
            continue
        return candidate
    return None


def _require_bearer(document: dict[str, Any]) -> None:
    document["components"]["securitySchemes"] = {
        "bearer": {"type": "http", "scheme": "bearer", "description": "The server's API_KEY."}
    }
    error = {"application/json": {"schema": {"$ref": SCHEMAS + ErrorBody.__name__}}}
    key = "A valid API key is required: `Authorization: Bearer <key>`."
    key_or_token = (
        "A valid API key (`Authorization: Bearer <key>`) or stream token (`?token=`) is required."
    )
    for path, path_item in document["paths"].items():
        if path in PUBLIC_PATHS:
            continue
        for method, operation in path_item.items():
            # What `ApiKeyMiddleware` lets a stream token open: a stream's GETs.
            opened = method == "get" and STREAM_PATH.match(path.replace("{stream_id}", "s"))
            operation["security"] = [{"bearer": []}]
            operation["responses"]["401"] = {
                "description": key_or_token if opened else key,
                "content": error,
            }
