"""`build_child`: the child a `subagent` call starts, from the parent alone: its category, its
skills, each field of its `InheritancePolicy`, its prompt's inventory; and its timeout and
depth limit."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from pydantic import BaseModel

from app import (
    Delegation,
    FreeSubagents,
    InheritancePolicy,
    Skill,
    Subagent,
    ToolPermissions,
    define_agent,
    define_tool,
)
from app.agents import AgentConfig, build_child, depth_refusal, resolve_timeout
from app.errors import DelegationError
from app.models import ScriptedModel


class Q(BaseModel):
    q: str


class Out(BaseModel):
    value: int


def tool(name: str) -> Any:
    return define_tool(name, description=f"The {name} tool.", input_schema=Q)


READ, WRITE, SEARCH, FETCH = tool("read"), tool("write"), tool("search"), tool("fetch")
WEB = Skill("web", description="Web research", prompt="Cite sources.", tools=[SEARCH, FETCH])
MATH = Skill("math", description="Sums")
MODEL = ScriptedModel([])


def parent_with(
    *subagents: Subagent | AgentConfig,
    free_form: FreeSubagents | None = None,
    prompt: str = "Be careful.",
    permissions: ToolPermissions | None = None,
) -> AgentConfig:
    return define_agent(
        "boss",
        system_prompt=prompt,
        tools=[READ, WRITE],
        skills=[WEB],
        model=MODEL,
        permissions=permissions,
        delegation=Delegation(subagents, skills=[WEB, MATH], free_form=free_form),
    )


def names(agent: AgentConfig) -> list[str]:
    return [t.name for t in agent.tools]


ISOLATED = InheritancePolicy(enabled=False)


def test_a_registered_category_runs_its_agent_under_its_name() -> None:
    researcher = define_agent(
        "researcher", system_prompt="Research.", output_schema=Out, max_steps=4, tools=[READ]
    )
    child = build_child(parent_with(Subagent(researcher, inheritance=ISOLATED)), "researcher")
    assert child.name == "researcher"
    assert child is not researcher
    assert (child.output_schema, child.max_steps, child.model, child.hooks) == (
        Out,
        4,
        None,
        researcher.hooks,
    )
    assert names(child) == ["read"]
    assert child.tool_map == {"read": READ}
    assert child.system_prompt == (
        "Research.\n\n## Available Tools\n${_installed_tools}"
        "\n\n## Available Skills\n${_installed_skills}"
    )
    assert child.rendered_system_prompt == (
        "Research.\n\n## Available Tools\n- read: The read tool.\n\n## Available Skills\n(none)"
    )


def test_without_delegation_or_a_known_category_the_call_is_refused() -> None:
    with pytest.raises(DelegationError, match="Agent 'solo' does not delegate to subagents"):
        build_child(define_agent("solo"), "x")
    parent = parent_with(define_agent("a"), define_agent("b"))
    with pytest.raises(
        DelegationError, match=r"Unknown subagent category 'c'\. Allowed categories: a, b$"
    ):
        build_child(parent, "c")


def test_a_registered_category_wins_over_free_form() -> None:
    registered = define_agent("writer", system_prompt="Registered.")
    parent = parent_with(Subagent(registered, inheritance=ISOLATED), free_form=FreeSubagents())
    assert build_child(parent, "writer").system_prompt.startswith("Registered.")


def test_a_free_form_child_is_made_from_the_parent() -> None:
    free = FreeSubagents(
        system_prompt="You are {category}.", skills=["math"], inheritance=ISOLATED, max_steps=7
    )
    child = build_child(parent_with(free_form=free), "security-reviewer")
    assert (child.name, child.model, child.max_steps, child.output_schema) == (
        "security-reviewer",
        MODEL,
        7,
        None,
    )
    assert child.skills == (MATH,)
    assert child.delegation is None
    assert child.rendered_system_prompt == (
        "You are security-reviewer.\n\n## Available Tools\n(none)"
        "\n\n## Available Skills\n- math: Sums"
    )


@pytest.mark.parametrize("category", ["9lives", "has space", "x" * 60, "dots.no"])
def test_a_free_form_category_must_be_an_agent_name(category: str) -> None:
    with pytest.raises(DelegationError, match=r"Invalid category .* Free-form category names"):
        build_child(parent_with(free_form=FreeSubagents()), category)


def test_a_free_form_child_gets_its_policy() -> None:
    free = FreeSubagents(inheritance=InheritancePolicy(inherit_tools=["read"]))
    child = build_child(parent_with(free_form=free), "helper")
    assert names(child) == ["read"]
    assert "Be careful." in child.system_prompt


def test_skills_are_the_categorys_then_the_calls_from_the_pool() -> None:
    own = Skill("own", tools=[tool("own_tool")])
    agent = define_agent("r", skills=[own])
    parent = parent_with(Subagent(agent, skills=["math"], inheritance=ISOLATED))
    child = build_child(parent, "r", ["web", "math"])
    assert [s.name for s in child.skills] == ["own", "math", "web"]
    assert names(child) == ["own_tool", "search", "fetch"]
    assert child.rendered_system_prompt.endswith(
        "## Available Skills\n- own\n- math: Sums\n- web: Web research\nCite sources."
    )
    with pytest.raises(
        DelegationError, match=r"Unknown skill 'nope'\. Available skills: web, math$"
    ):
        build_child(parent, "r", ["nope"])


def test_a_loaded_skill_whose_tool_clashes_is_refused() -> None:
    agent = define_agent("r", tools=[tool("search")])
    parent = parent_with(Subagent(agent, inheritance=ISOLATED))
    with pytest.raises(DelegationError, match="Skill 'web' cannot be installed on subagent 'r'"):
        build_child(parent, "r", ["web"])
    same = define_agent("s", tools=[SEARCH])
    assert names(build_child(parent_with(Subagent(same, inheritance=ISOLATED)), "s", ["web"])) == [
        "search",
        "fetch",
    ]


def test_a_loaded_skill_the_child_already_has_is_installed_once() -> None:
    agent = define_agent("r", skills=[WEB])
    child = build_child(parent_with(Subagent(agent, inheritance=ISOLATED)), "r", ["web"])
    assert child.skills == (WEB,)
    assert names(child) == ["search", "fetch"]


def test_a_loaded_skill_named_like_a_different_installed_skill_is_refused() -> None:
    agent = define_agent("r", skills=[Skill("web")])
    parent = parent_with(Subagent(agent, inheritance=ISOLATED))
    with pytest.raises(DelegationError, match="already has another skill named 'web'"):
        build_child(parent, "r", ["web"])


def test_enabled_false_inherits_nothing() -> None:
    policy = InheritancePolicy(
        enabled=False, inherit_tools=["read"], inherit_permissions=True, inherit_system_prompt=True
    )
    parent = parent_with(
        Subagent(define_agent("r", system_prompt="Mine."), inheritance=policy),
        permissions=ToolPermissions(deny=["x"]),
    )
    child = build_child(parent, "r")
    assert names(child) == []
    assert child.permissions is None
    assert child.system_prompt.startswith("Mine.\n\n## Available Tools")


@pytest.mark.parametrize(
    ("own", "parents", "inherit", "expected"),
    [
        ("Mine.", "Be careful.", True, "Mine.\n\nBe careful."),
        ("Mine.", "Be careful.", False, "Mine."),
        ("", "Be careful.", True, "Be careful."),
        ("Mine.", "", True, "Mine."),
    ],
)
def test_inherit_system_prompt_appends_the_parents(
    own: str, parents: str, inherit: bool, expected: str
) -> None:
    policy = InheritancePolicy(inherit_system_prompt=inherit)
    parent = parent_with(
        Subagent(define_agent("r", system_prompt=own), inheritance=policy), prompt=parents
    )
    template = build_child(parent, "r").system_prompt
    assert template.split("\n\n## Available Tools")[0] == expected


def test_inherit_tools_copies_only_the_listed_tools_in_order() -> None:
    policy = InheritancePolicy(inherit_tools=["write", "read"])
    child = build_child(parent_with(Subagent(define_agent("r"), inheritance=policy)), "r")
    assert names(child) == ["write", "read"]
    assert child.tool_map["write"] is WRITE
    assert child.skills == ()


def test_a_tool_from_a_parents_skill_brings_the_skill() -> None:
    policy = InheritancePolicy(inherit_tools=["fetch"])
    child = build_child(parent_with(Subagent(define_agent("r"), inheritance=policy)), "r")
    assert child.skills == (WEB,)
    assert names(child) == ["search", "fetch"]


def test_a_missing_tool_warns_and_is_skipped_by_default(caplog: pytest.LogCaptureFixture) -> None:
    policy = InheritancePolicy(inherit_tools=["nope", "read"])
    parent = parent_with(Subagent(define_agent("r"), inheritance=policy))
    with caplog.at_level(logging.WARNING, logger="app.agents.inheritance"):
        child = build_child(parent, "r")
    assert names(child) == ["read"]
    assert [record.getMessage() for record in caplog.records] == [
        "Subagent 'r' inherits tool 'nope', but agent 'boss' has no tool or skill that "
        "provides it; going on without it"
    ]


def test_a_missing_tool_is_refused_under_missing_skill_policy_error() -> None:
    policy = InheritancePolicy(inherit_tools=["nope"], missing_skill_policy="error")
    parent = parent_with(Subagent(define_agent("r"), inheritance=policy))
    with pytest.raises(DelegationError, match="inherits tool 'nope', but agent 'boss' has no"):
        build_child(parent, "r")


@pytest.mark.parametrize("conflict", ["skip", "error", "override"])
def test_tool_conflict_policy(conflict: Any) -> None:
    own_read = tool("read")
    agent = define_agent("r", tools=[tool("first"), own_read, tool("last")])
    policy = InheritancePolicy(inherit_tools=["read"], tool_conflict_policy=conflict)
    parent = parent_with(Subagent(agent, inheritance=policy))
    if conflict == "error":
        with pytest.raises(DelegationError, match=r"cannot inherit tool 'read'.*'error'"):
            build_child(parent, "r")
        return
    child = build_child(parent, "r")
    assert names(child) == ["first", "read", "last"]
    assert child.tool_map["read"] is (own_read if conflict == "skip" else READ)


def test_the_same_tool_is_no_conflict() -> None:
    agent = define_agent("r", tools=[READ])
    policy = InheritancePolicy(inherit_tools=["read"], tool_conflict_policy="error")
    assert names(build_child(parent_with(Subagent(agent, inheritance=policy)), "r")) == ["read"]


def test_an_inherited_skills_tools_follow_the_conflict_policy() -> None:
    own_fetch = tool("fetch")
    agent = define_agent("r", tools=[own_fetch])
    policy = InheritancePolicy(inherit_tools=["search"], tool_conflict_policy="override")
    child = build_child(parent_with(Subagent(agent, inheritance=policy)), "r")
    assert names(child) == ["fetch", "search"]
    assert child.tool_map["fetch"] is FETCH


@pytest.mark.parametrize(
    ("own", "inherit", "expected"),
    [
        (None, True, ToolPermissions(allow=("read",), deny=("write",))),
        (None, False, None),
        (
            ToolPermissions(allow=["read", "x"], deny=["y"]),
            True,
            ToolPermissions(allow=("read",), deny=("y", "write")),
        ),
        (ToolPermissions(deny=["y"]), False, ToolPermissions(deny=("y",))),
    ],
)
def test_inherit_permissions(
    own: ToolPermissions | None, inherit: bool, expected: ToolPermissions | None
) -> None:
    agent = define_agent("r", permissions=own)
    policy = InheritancePolicy(inherit_permissions=inherit)
    parent = parent_with(
        Subagent(agent, inheritance=policy),
        permissions=ToolPermissions(allow=["read"], deny=["write"]),
    )
    assert build_child(parent, "r").permissions == expected


def test_a_childs_prompt_placing_its_placeholders_gets_no_sections() -> None:
    agent = define_agent(
        "r", system_prompt="Tools: ${_installed_tools}\nSkills: ${_installed_skills}"
    )
    child = build_child(parent_with(Subagent(agent, inheritance=ISOLATED)), "r", ["math"])
    assert child.rendered_system_prompt == "Tools: (none)\nSkills: - math: Sums"
    only_tools = define_agent("t", system_prompt="${_installed_tools}")
    template = build_child(
        parent_with(Subagent(only_tools, inheritance=ISOLATED)), "t"
    ).system_prompt
    assert template == "${_installed_tools}\n\n## Available Skills\n${_installed_skills}"


def test_the_parents_prompt_renders_its_inventory() -> None:
    prompt = (
        "Cost: $5.\n${_installed_subagents}\n---\n${_installed_tools}\n---\n${_installed_skills}"
    )
    parent = parent_with(
        Subagent(define_agent("r"), description="Researches."),
        free_form=FreeSubagents(),
        prompt=prompt,
        permissions=ToolPermissions(deny=["subagent_cancel"]),
    )
    rendered = parent.rendered_system_prompt
    subagents, tools, skills = rendered.split("\n---\n")
    assert subagents == (
        "Cost: $5.\n- r: Researches.\nFree-form categories are allowed: any other category "
        "name (letters, digits, '-' and '_') starts a general subagent of that name."
    )
    assert tools.splitlines()[:4] == [
        "- read: The read tool.",
        "- write: The write tool.",
        "- search: The search tool.",
        "- fetch: The fetch tool.",
    ]
    assert [line.split(":")[0] for line in tools.splitlines()[4:]] == [
        "- subagent",
        "- subagent_status",
        "- subagent_result",
        "- subagent_wait",
    ]
    assert skills == "- web: Web research\nCite sources."
    closed = parent_with(define_agent("r"), prompt="${_installed_subagents}")
    assert (
        closed.rendered_system_prompt == "- r: no description\nOnly these categories are allowed."
    )
    assert define_agent("x", system_prompt="${_installed_subagents}").rendered_system_prompt == (
        "(none)"
    )
    assert (
        parent_with(define_agent("r"), prompt="Plain $HOME.").rendered_system_prompt
        == "Plain $HOME."
    )


def test_the_child_is_the_same_for_the_same_call() -> None:
    free = FreeSubagents(inheritance=InheritancePolicy(inherit_tools=["fetch", "read"]))
    parent = parent_with(free_form=free)
    first, second = (
        build_child(parent, "auditor", ["math"]),
        build_child(parent, "auditor", ["math"]),
    )
    assert first is not second
    assert (first.name, first.system_prompt, first.tools, first.skills, first.model) == (
        second.name,
        second.system_prompt,
        second.tools,
        second.skills,
        second.model,
    )
    assert first.rendered_system_prompt == second.rendered_system_prompt


def test_a_registered_child_keeps_its_own_delegation() -> None:
    grandchild = define_agent("g")
    middle = define_agent("m", delegation=Delegation([grandchild]))
    child = build_child(parent_with(Subagent(middle, inheritance=ISOLATED)), "m")
    assert child.delegation is middle.delegation
    assert names(child)[0] == "subagent"
    assert build_child(child, "g").name == "g"


def test_timeout_precedence() -> None:
    timed = Subagent(define_agent("timed"), timeout=20)
    untimed = define_agent("untimed")
    parent = define_agent("p", delegation=Delegation([timed, untimed], default_timeout=30))
    assert resolve_timeout(parent, "timed", 5, runtime_default=60) == 5
    assert resolve_timeout(parent, "timed", None, runtime_default=60) == 20
    assert resolve_timeout(parent, "untimed", None, runtime_default=60) == 30
    assert resolve_timeout(parent, "free-one", None, runtime_default=60) == 30
    bare = define_agent("b", delegation=Delegation([untimed]))
    assert resolve_timeout(bare, "untimed", None, runtime_default=60) == 60
    assert resolve_timeout(bare, "untimed", None) is None
    assert resolve_timeout(define_agent("solo"), "x", None, runtime_default=1) == 1


def test_depth_limit() -> None:
    parent = define_agent("p", delegation=Delegation(free_form=FreeSubagents(), max_depth=2))
    assert depth_refusal(parent, 1) is None
    assert depth_refusal(parent, 2) is None
    assert depth_refusal(parent, 3) == (
        "Delegation depth limit reached: a subagent here would be 3 levels deep and the limit "
        "is 2. Do this task yourself."
    )
    assert depth_refusal(define_agent("solo"), 10) is None
