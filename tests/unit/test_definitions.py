"""Definition-time errors name the offending agent or tool; the public API is as DESIGN.md fixes."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

import app
from app import AgentRegistry, create_sub_agent_tool, define_agent, define_tool
from app.agents import Tool, ToolContext
from app.errors import AgentNotFoundError, DefinitionError, InvalidSessionIdError
from app.ids import persistent_session_id, remote_session_id, sub_session_id, validate_session_id
from app.models import ModelResponse, ScriptedModel


class In(BaseModel):
    text: str


class Out(BaseModel):
    value: int


def test_public_api_is_pinned() -> None:
    assert sorted(app.__all__) == [
        "AgentRegistry",
        "AgentRuntime",
        "Delegation",
        "FreeSubagents",
        "HttpRemoteAgentTransport",
        "InheritancePolicy",
        "PersistentAgent",
        "Skill",
        "Subagent",
        "ToolPermissions",
        "create_app",
        "create_remote_sub_agent_tool",
        "create_sub_agent_tool",
        "define_agent",
        "define_tool",
    ]
    from app.models import FunctionModel, ModelResponse, ScriptedModel, ToolCall  # noqa: F401
    from app.store import create_store  # noqa: F401


@pytest.mark.parametrize("name", ["subagent__x", "companion__spawnAgent", "__finish__", "__x"])
def test_reserved_tool_names_are_rejected(name: str) -> None:
    with pytest.raises(DefinitionError, match=f"Tool name '{name}' uses a reserved prefix"):
        define_tool(name, description="", input_schema=In)
    sneaky = Tool(name, "", In)
    with pytest.raises(DefinitionError, match=f"Agent 'host': Tool name '{name}' uses a reserved"):
        define_agent("host", tools=[sneaky])


def test_sub_agent_needs_an_output_schema() -> None:
    untyped = define_agent("untyped")
    with pytest.raises(DefinitionError, match="Agent 'untyped' cannot be a sub-agent: it has no"):
        create_sub_agent_tool(untyped, In)


def test_sub_agent_tools_are_named_after_their_agent() -> None:
    child = define_agent("text-analyzer", output_schema=Out, description="Analyses text.")
    tool = create_sub_agent_tool(child, In, timeout=5)
    assert (tool.name, tool.description, tool.timeout) == (
        "subagent__text-analyzer",
        "Analyses text.",
        5,
    )
    parent = define_agent("parent", tools=[tool])
    assert parent.tool_map["subagent__text-analyzer"] is tool
    assert [spec.name for spec in child.tool_specs] == ["__finish__"]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: define_agent("9lives"), "Agent name '9lives' must match"),
        (lambda: define_agent("x" * 60), "must match"),
        (lambda: define_agent("a", max_steps=0), "Agent 'a': max_steps must be a positive"),
        (
            lambda: define_agent("a", output_schema=dict),
            "Agent 'a': output_schema must be a pydantic",
        ),
        (lambda: define_agent("a", model="gpt"), "Agent 'a': model must be an app.models.Model"),
        (lambda: define_agent("a", tools=["add"]), "Agent 'a': 'add' is not a tool"),
        (
            lambda: define_agent(
                "a",
                tools=[define_tool("t", description="", input_schema=In)] * 2,
            ),
            "Agent 'a': two tools are named 't'",
        ),
        (lambda: define_tool("has space", description="", input_schema=In), "must match"),
        (lambda: define_tool("t", description="", input_schema=dict), "Tool 't': input_schema"),
        (lambda: define_tool("t", description="", input_schema=In, timeout=0), "timeout must be"),
        (lambda: create_sub_agent_tool("agent", In), "needs an agent from define_agent"),
        (lambda: ScriptedModel([], latency=-1), "latency must be >= 0"),
    ],
)
def test_definition_mistakes_are_clear(make: Any, message: str) -> None:
    with pytest.raises(DefinitionError, match=message):
        make()


def test_state_schema_fields_need_defaults() -> None:
    class State(BaseModel):
        required: int

    with pytest.raises(
        DefinitionError, match="Agent 'a': every state_schema field needs a default"
    ):
        define_agent("a", state_schema=State)


def test_tools_work_as_decorators_and_without_executor() -> None:
    client = define_tool("ask_user", description="Ask the user.", input_schema=In)
    assert client.is_client_tool

    @define_tool("shout", description="Shout.", input_schema=In)
    def shout(input: In, ctx: ToolContext[Any]) -> str:
        return input.text.upper()

    assert not shout.is_client_tool
    assert not shout.is_async
    assert shout.spec.parameters["properties"] == {"text": {"title": "Text", "type": "string"}}
    with pytest.raises(DefinitionError, match="already has an execute function"):
        shout(lambda i, c: None)


def test_registry_collects_sub_agents_and_rejects_name_clashes() -> None:
    child = define_agent("child", output_schema=Out)
    parent = define_agent("parent", tools=[create_sub_agent_tool(child, In)])
    registry = AgentRegistry([parent])
    assert [agent.name for agent in registry] == ["parent", "child"]
    assert registry.get("child") is child
    with pytest.raises(AgentNotFoundError, match="Unknown agent type 'nobody'"):
        registry.get("nobody")
    with pytest.raises(DefinitionError, match="Two different agents are named 'child'"):
        registry.register(define_agent("child"))


def test_persistent_agents_get_the_companion_tools() -> None:
    blocking = define_agent("researcher", description="Researches.", output_schema=Out)
    background = define_agent("worker", output_schema=Out)
    parent = define_agent(
        "parent",
        persistent_agents=[
            app.PersistentAgent(blocking, description="Deep dives"),
            app.PersistentAgent(background, mode="non-blocking"),
        ],
    )
    assert [spec.name for spec in parent.tool_specs] == [
        "companion__spawnAgent",
        "companion__sendMessage",
        "companion__listChildren",
        "companion__getChildStatus",
        "companion__waitForResult",
        "companion__terminateChild",
    ]
    spawn = parent.tool_specs[0].parameters
    assert spawn["required"] == ["agent", "initialMessage"]
    assert spawn["properties"]["agent"]["enum"] == ["researcher", "worker"]
    assert "researcher (blocking): Deep dives" in spawn["properties"]["agent"]["description"]
    assert set(spawn["properties"]) == {"agent", "initialMessage", "name"}
    send = parent.tool_specs[1].parameters
    assert set(send["properties"]) == {"name", "message"}
    assert app.AgentRegistry([parent]).get("worker") is background
    # Only non-blocking children: nothing to wait for, so no waitForResult.
    only_background = define_agent(
        "p2", persistent_agents=[app.PersistentAgent(background, mode="non-blocking")]
    )
    assert "companion__waitForResult" not in only_background.tool_map


def test_persistent_agents_are_checked() -> None:
    child = define_agent("child", output_schema=Out)
    with pytest.raises(DefinitionError, match="'child' appears more than once"):
        define_agent(
            "parent",
            persistent_agents=[app.PersistentAgent(child), app.PersistentAgent(child)],
        )
    with pytest.raises(DefinitionError, match="needs an output_schema"):
        define_agent("parent", persistent_agents=[app.PersistentAgent(define_agent("bare"))])
    with pytest.raises(DefinitionError, match="takes PersistentAgent entries"):
        define_agent("parent", persistent_agents=[child])  # type: ignore[list-item]
    with pytest.raises(DefinitionError, match="mode must be 'blocking' or 'non-blocking'"):
        app.PersistentAgent(child, mode="sometimes")  # type: ignore[arg-type]
    with pytest.raises(DefinitionError, match="reserved prefix"):
        app.define_tool("companion__mine", description="x", input_schema=Out)


def test_child_ids_are_deterministic_and_valid() -> None:
    assert sub_session_id("root", "call_1") == "root-sub-call_1"
    assert remote_session_id("root", "c") == "root-remote-c"
    assert persistent_session_id("root", "researcher-1") == "root-agent-researcher-1"
    assert sub_session_id("root", "call/with spaces") == "root-sub-call_with_spaces"
    deep = sub_session_id("r" * 190, "c" * 40)
    assert len(deep) == 200
    assert deep == sub_session_id("r" * 190, "c" * 40)
    assert validate_session_id(deep) == deep
    for bad in ["", "a b", "x" * 201, "é"]:
        with pytest.raises(InvalidSessionIdError):
            validate_session_id(bad)


def test_scripted_responses_default_to_nothing() -> None:
    response = ModelResponse()
    assert (response.text, list(response.tool_calls), response.usage) == ("", [], None)
