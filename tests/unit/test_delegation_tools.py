"""The delegation tools as a model sees them: their argument names are the seed's, their
descriptions list what may be asked for, and bad arguments are tool errors, never exceptions."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from app import Delegation, FreeSubagents, Skill, Subagent, define_agent
from app.agents import DelegationTool
from app.agents.delegation_tools import (
    SubagentCancelInput,
    SubagentInput,
    SubagentResultInput,
    SubagentStatusInput,
    SubagentWaitInput,
)
from app.runtime.calls import CallResult, parse_arguments


def tools_of(delegation: Delegation) -> dict[str, DelegationTool]:
    agent = define_agent("boss", delegation=delegation)
    return {t.name: t for t in agent.tools if isinstance(t, DelegationTool)}


def registered() -> Delegation:
    return Delegation(
        [
            define_agent("researcher", description="Finds facts."),
            Subagent(define_agent("writer"), description="Writes prose."),
            define_agent("critic"),
        ],
        skills=[Skill("web", description="Search the web."), Skill("math")],
    )


def test_the_subagent_description_lists_categories_skills_and_no_free_form() -> None:
    description = tools_of(registered())["subagent"].description
    assert description.split("\n\n", 1)[1] == (
        "Categories:\n"
        "- researcher: Finds facts.\n"
        "- writer: Writes prose.\n"
        "- critic: no description\n"
        "\n"
        "Only these categories are allowed.\n"
        "\n"
        "Skills load_skills may name:\n"
        "- web: Search the web.\n"
        "- math: no description"
    )


def test_the_subagent_description_says_free_form_is_allowed() -> None:
    description = tools_of(Delegation(free_form=FreeSubagents()))["subagent"].description
    assert "Categories:\n(none registered)\n\nFree-form categories are allowed" in description
    assert "Only these categories" not in description
    assert "Skills load_skills may name" not in description


def test_the_category_is_an_enum_only_without_free_form() -> None:
    closed = tools_of(registered())["subagent"].spec.parameters["properties"]["category"]
    assert closed["enum"] == ["researcher", "writer", "critic"]
    open_ = Delegation([define_agent("r")], free_form=FreeSubagents())
    assert "enum" not in tools_of(open_)["subagent"].spec.parameters["properties"]["category"]


def test_argument_names_are_the_seeds() -> None:
    tools = tools_of(registered())
    fields = {name: list(t.input_schema.model_fields) for name, t in tools.items()}
    assert fields == {
        "subagent": ["category", "prompt", "load_skills", "background", "timeout"],
        "subagent_status": ["session_id"],
        "subagent_result": ["session_id", "read_method", "timeout"],
        "subagent_cancel": ["session_id"],
        "subagent_wait": ["session_ids", "timeout"],
    }
    assert all(t.description for t in tools.values())
    for t in tools.values():
        for name, prop in t.spec.parameters["properties"].items():
            assert prop.get("description"), (t.name, name)


def parse(schema: type[BaseModel], arguments: dict[str, Any]) -> BaseModel | CallResult:
    return parse_arguments("tool", schema, arguments)


def test_subagent_arguments_parse_with_their_defaults() -> None:
    parsed = parse(SubagentInput, {"category": " researcher ", "prompt": "Go"})
    assert parsed == SubagentInput(category="researcher", prompt="Go")
    assert isinstance(parsed, SubagentInput)
    assert (parsed.load_skills, parsed.background, parsed.timeout) == (None, False, None)
    full = parse(
        SubagentInput,
        {
            "category": "r",
            "prompt": "Go",
            "load_skills": ["web", "web", "math"],
            "background": True,
            "timeout": 30,
        },
    )
    assert isinstance(full, SubagentInput)
    assert (full.load_skills, full.background, full.timeout) == (["web", "math"], True, 30.0)


@pytest.mark.parametrize(
    ("schema", "arguments", "error"),
    [
        (SubagentInput, {"prompt": "x"}, "category: Field required"),
        (SubagentInput, {"category": "", "prompt": "x"}, "category: String should have at least"),
        (SubagentInput, {"category": "r", "prompt": "  "}, "prompt: Value error, must not be"),
        (SubagentInput, {"category": "r", "prompt": "x", "load_skills": "web"}, "load_skills:"),
        (SubagentInput, {"category": "r", "prompt": "x", "load_skills": [""]}, "load_skills.0:"),
        (SubagentInput, {"category": "r", "prompt": "x", "timeout": 0}, "timeout: Value error"),
        (SubagentInput, {"category": "r", "prompt": "x", "timeout": -5}, "must be a positive"),
        (SubagentInput, {"category": "r", "prompt": "x", "background": "maybe"}, "background:"),
        (SubagentInput, {"category": "r", "prompt": "x", "extra": 1}, "extra: Extra inputs"),
        (SubagentStatusInput, {"session_id": ""}, "session_id: String should have"),
        (SubagentResultInput, {}, "session_id: Field required"),
        (SubagentResultInput, {"session_id": "s", "read_method": "brief"}, "read_method: Input"),
        (SubagentResultInput, {"session_id": "s", "timeout": -1}, "timeout: Value error"),
        (SubagentCancelInput, {"session_id": " "}, "session_id: String should have"),
        (SubagentWaitInput, {"session_ids": "s-1"}, "session_ids: Input should be a valid list"),
        (SubagentWaitInput, {"timeout": float("nan")}, "timeout: Value error"),
    ],
)
def test_bad_arguments_are_tool_errors(
    schema: type[BaseModel], arguments: dict[str, Any], error: str
) -> None:
    parsed = parse(schema, arguments)
    assert isinstance(parsed, CallResult)
    assert parsed.error is not None
    assert parsed.error.startswith("Invalid arguments for tool 'tool': ")
    assert error in parsed.error


def test_control_arguments_parse_with_their_defaults() -> None:
    assert parse(SubagentStatusInput, {}) == SubagentStatusInput(session_id=None)
    result = parse(SubagentResultInput, {"session_id": "s"})
    assert result == SubagentResultInput(session_id="s", read_method="full", timeout=None)
    assert parse(SubagentResultInput, {"session_id": "s", "timeout": 0}) == SubagentResultInput(
        session_id="s", timeout=0
    )
    assert parse(SubagentCancelInput, {"session_id": "s"}) == SubagentCancelInput(session_id="s")
    assert parse(SubagentWaitInput, {}) == SubagentWaitInput(session_ids=None, timeout=None)
    waited = parse(SubagentWaitInput, {"session_ids": ["a", "b", "a"], "timeout": 60})
    assert waited == SubagentWaitInput(session_ids=["a", "b"], timeout=60)
    # [] is read as "any session", like an omitted list.
    assert parse(SubagentWaitInput, {"session_ids": []}) == SubagentWaitInput(session_ids=None)
