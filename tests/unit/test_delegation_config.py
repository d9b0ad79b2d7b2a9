"""The seed-004 configuration types and what `define_agent` does with them: each refuses a bad
value with a `DefinitionError` that names it, and the delegation tools come in a fixed order."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pydantic import BaseModel

from app import (
    AgentRegistry,
    Delegation,
    FreeSubagents,
    InheritancePolicy,
    PersistentAgent,
    Skill,
    Subagent,
    ToolPermissions,
    define_agent,
    define_tool,
)
from app.agents import DelegationTool, denied
from app.errors import DefinitionError


class Q(BaseModel):
    q: str


class Out(BaseModel):
    value: int


def tool(name: str, description: str = "") -> Any:
    return define_tool(name, description=description or f"The {name} tool.", input_schema=Q)


def loose(value: object) -> Any:
    """`value`, for a test that passes a wrongly typed one on purpose."""
    return value


OPEN = Delegation(free_form=FreeSubagents())

CONTROL = ["subagent", "subagent_status", "subagent_result", "subagent_cancel", "subagent_wait"]


def test_skill_holds_its_tools_and_prompt() -> None:
    search = tool("search")
    skill = Skill("web", description="Web research", prompt="Cite sources.", tools=[search])
    assert (skill.name, skill.description, skill.prompt, skill.tools) == (
        "web",
        "Web research",
        "Cite sources.",
        (search,),
    )
    assert skill.provides("search")
    assert not skill.provides("read")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Skill(""), "Skill name must be a non-empty string"),
        (
            lambda: Skill("web", prompt=loose(3)),
            "Skill 'web': description and prompt must be strings",
        ),
        (lambda: Skill("web", tools=tool("a")), "Skill 'web': tools must be a list of tools"),
        (lambda: Skill("web", tools=loose(["a"])), "Skill 'web': 'a' is not a function tool"),
        (lambda: Skill("web", tools=[tool("a"), tool("a")]), "two tools are named 'a'"),
    ],
)
def test_skill_refuses_bad_values(make: Callable[[], object], message: str) -> None:
    with pytest.raises(DefinitionError, match=message):
        make()


def test_tool_permissions_allow_and_deny() -> None:
    everything = ToolPermissions()
    assert everything.allows("anything")
    listed = ToolPermissions(allow=["search", "read"], deny=["read"])
    assert listed.allow == ("search", "read")
    assert listed.deny == ("read",)
    assert listed.allows("search")
    assert not listed.allows("read")  # the deny list wins
    assert not listed.allows("write")
    assert listed.refusal("read") == "the deny list (read) names it"
    assert listed.refusal("write") == "it is not on the allow list (search, read)"
    assert ToolPermissions(allow=[]).refusal("x") == "it is not on the allow list (empty)"


def test_tool_permissions_restricted_by_allows_only_what_both_allow() -> None:
    child = ToolPermissions(allow=["a", "b", "c"], deny=["c"])
    parent = ToolPermissions(allow=["b", "c", "d"], deny=["b"])
    both = child.restricted_by(parent)
    assert both == ToolPermissions(allow=("b", "c"), deny=("c", "b"))
    assert [n for n in "abcd" if both.allows(n)] == []
    assert ToolPermissions().restricted_by(parent) == parent
    assert child.restricted_by(ToolPermissions()) == child


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: ToolPermissions(allow="search"), "allow must be a list of names"),
        (lambda: ToolPermissions(deny=[""]), "deny must hold non-empty names"),
        (lambda: ToolPermissions(deny=loose([3])), "deny must hold non-empty names, got 3"),
    ],
)
def test_tool_permissions_refuse_bad_values(make: Callable[[], object], message: str) -> None:
    with pytest.raises(DefinitionError, match=message):
        make()


def test_inheritance_policy_defaults_are_the_seeds() -> None:
    policy = InheritancePolicy()
    assert (
        policy.enabled,
        policy.inherit_system_prompt,
        policy.inherit_tools,
        policy.inherit_permissions,
        policy.tool_conflict_policy,
        policy.missing_skill_policy,
    ) == (True, True, (), False, "skip", "warn")
    assert InheritancePolicy(inherit_tools=["a", "b"]).inherit_tools == ("a", "b")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"enabled": 1}, "enabled must be True or False"),
        ({"inherit_system_prompt": "yes"}, "inherit_system_prompt must be True or False"),
        ({"inherit_permissions": None}, "inherit_permissions must be True or False"),
        ({"inherit_tools": "search"}, "inherit_tools must be a list of names"),
        ({"tool_conflict_policy": "merge"}, "tool_conflict_policy must be 'skip', 'error'"),
        ({"missing_skill_policy": "ignore"}, "missing_skill_policy must be 'warn' or 'error'"),
    ],
)
def test_inheritance_policy_refuses_bad_values(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(DefinitionError, match=message):
        InheritancePolicy(**kwargs)


def test_subagent_names_its_category_after_its_agent() -> None:
    agent = define_agent("researcher", description="Finds facts.")
    assert Subagent(agent).category == "researcher"
    assert Subagent(agent).summary == "Finds facts."
    assert Subagent(agent, description="Digs.").summary == "Digs."
    assert Subagent(define_agent("x")).summary == "no description"
    assert Subagent(agent).inheritance == InheritancePolicy()
    assert Subagent(agent, skills=["web"], timeout=2).skills == ("web",)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"timeout": 0}, "Subagent 'r': timeout must be a positive number"),
        ({"timeout": True}, "timeout must be a positive number"),
        ({"timeout": float("inf")}, "timeout must be finite"),
        ({"skills": "web"}, "Subagent 'r': skills must be a list of names"),
        ({"inheritance": {}}, "inheritance must be an InheritancePolicy"),
        ({"description": 5}, "description must be a string"),
    ],
)
def test_subagent_refuses_bad_values(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(DefinitionError, match=message):
        Subagent(define_agent("r"), **kwargs)
    with pytest.raises(DefinitionError, match="Subagent needs an agent from define_agent"):
        Subagent("r")  # type: ignore[arg-type]


def test_free_subagents_prompt_names_the_category() -> None:
    free = FreeSubagents()
    assert free.max_steps == 20
    assert free.prompt_for("security-reviewer").startswith("You are a security-reviewer subagent")
    assert "<subagent_background_result>" in free.system_prompt
    custom = FreeSubagents(system_prompt='Be a {category}. Answer {"ok": true}.')
    assert custom.prompt_for("poet") == 'Be a poet. Answer {"ok": true}.'


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_steps": 0}, "FreeSubagents: max_steps must be a positive integer"),
        ({"max_steps": 2.5}, "max_steps must be a positive integer"),
        ({"system_prompt": None}, "system_prompt must be a string"),
        ({"skills": "web"}, "skills must be a list of names"),
        ({"inheritance": None}, "inheritance must be an InheritancePolicy"),
    ],
)
def test_free_subagents_refuse_bad_values(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(DefinitionError, match=message):
        FreeSubagents(**kwargs)


def test_delegation_takes_bare_agents_and_subagents() -> None:
    a, b = define_agent("a"), define_agent("b")
    web = Skill("web")
    delegation = Delegation([a, Subagent(b, skills=["web"])], skills=[web], default_timeout=9)
    assert delegation.categories == ("a", "b")
    assert [entry.agent for entry in delegation.entries] == [a, b]
    assert delegation.subagent("b") is delegation.entries[1]
    assert delegation.subagent("c") is None
    assert delegation.skill("web") is web
    assert delegation.skill("x") is None
    assert (delegation.free_form, delegation.default_timeout, delegation.max_depth) == (None, 9, 3)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Delegation(loose(define_agent("a"))), "subagents must be a list"),
        (lambda: Delegation(loose(["a"])), "subagents takes Subagent entries or agents, got 'a'"),
        (
            lambda: Delegation([define_agent("a"), define_agent("a")]),
            "two subagents are named 'a'",
        ),
        (lambda: Delegation(skills=loose(Skill("x"))), "skills must be a list of Skill"),
        (lambda: Delegation(skills=loose(["x"])), "skills takes Skill entries"),
        (lambda: Delegation(skills=[Skill("x"), Skill("x")]), "two skills are named 'x'"),
        (lambda: Delegation(free_form=loose(True)), "free_form must be a FreeSubagents or None"),
        (
            lambda: Delegation([Subagent(define_agent("a"), skills=["web"])]),
            r"Subagent 'a' names skill 'web', which is not in the skills pool \(empty\)",
        ),
        (
            lambda: Delegation(skills=[Skill("x")], free_form=FreeSubagents(skills=["web"])),
            r"FreeSubagents names skill 'web', which is not in the skills pool \(x\)",
        ),
        (
            lambda: Delegation(default_timeout=-1),
            "Delegation: default_timeout must be a positive number, got -1",
        ),
        (lambda: Delegation(max_depth=0), "max_depth must be a positive integer"),
        (lambda: Delegation(max_depth=True), "max_depth must be a positive integer"),
    ],
)
def test_delegation_refuses_bad_values(make: Callable[[], object], message: str) -> None:
    with pytest.raises(DefinitionError, match=message):
        make()


def test_delegation_refuses_a_category_skill_that_clashes_with_the_agents_tool() -> None:
    own, other = tool("search"), tool("search")
    agent = define_agent("r", tools=[own])
    clash = Skill("web", tools=[other])
    with pytest.raises(DefinitionError, match="skill 'web' of subagent 'r' brings a tool named"):
        Delegation([Subagent(agent, skills=["web"])], skills=[clash])
    same = Skill("web", tools=[own])
    Delegation([Subagent(agent, skills=["web"])], skills=[same])


def test_define_agent_adds_the_delegation_tools_last_in_a_fixed_order() -> None:
    read, search = tool("read"), tool("search")
    web = Skill("web", tools=[search])
    child = define_agent("child", output_schema=Out)
    agent = define_agent(
        "boss",
        tools=[read],
        skills=[web],
        persistent_agents=[PersistentAgent(child)],
        delegation=Delegation([child]),
    )
    names = [t.name for t in agent.tools]
    assert names[:2] == ["read", "search"]
    assert names[2].startswith("companion__")
    assert names[-5:] == CONTROL
    assert [spec.name for spec in agent.tool_specs] == names
    made = [agent.tool_map[name] for name in CONTROL]
    assert all(isinstance(t, DelegationTool) for t in made)
    kinds = [t.kind for t in made if isinstance(t, DelegationTool)]
    assert kinds == ["delegate", "status", "result", "cancel", "wait"]
    assert agent.skills == (web,)
    assert agent.delegation is not None
    assert agent.permissions is None


def test_define_agent_without_delegation_has_no_delegation_tools() -> None:
    agent = define_agent("plain", tools=[tool("subagent")])  # the name is free without delegation
    assert [t.name for t in agent.tools] == ["subagent"]
    assert agent.delegation is None


@pytest.mark.parametrize("name", CONTROL)
def test_a_user_tool_named_like_a_delegation_tool_is_refused(name: str) -> None:
    with pytest.raises(DefinitionError, match=f"Agent 'boss': tool name '{name}' is taken by"):
        define_agent("boss", tools=[tool(name)], delegation=OPEN)
    with pytest.raises(DefinitionError, match=f"tool name '{name}' is taken"):
        define_agent("boss", skills=[Skill("s", tools=[tool(name)])], delegation=OPEN)


@pytest.mark.parametrize("name", ["subagent_wait", "companion__spawnAgent"])
def test_an_inheritance_policy_cannot_name_a_parents_own_control_tool(name: str) -> None:
    policy = InheritancePolicy(inherit_tools=[name])
    delegation = Delegation([Subagent(define_agent("r"), inheritance=policy)])
    with pytest.raises(DefinitionError, match=f"subagent 'r' names '{name}', a tool made for"):
        define_agent("boss", delegation=delegation)
    free = Delegation(free_form=FreeSubagents(inheritance=policy))
    with pytest.raises(DefinitionError, match="free-form subagents names"):
        define_agent("boss", delegation=free)


def test_a_delegation_to_nothing_is_refused() -> None:
    with pytest.raises(DefinitionError, match="Agent 'boss': its delegation has no subagents and"):
        define_agent("boss", delegation=Delegation())


def test_skill_tools_join_the_agents_tools_once() -> None:
    search = tool("search")
    one, two = Skill("one", tools=[search]), Skill("two", tools=[search])
    agent = define_agent("a", tools=[search], skills=[one, two])
    assert [t.name for t in agent.tools] == ["search"]
    with pytest.raises(DefinitionError, match="skill 'two' brings a second tool named 'search'"):
        define_agent("a", tools=[search], skills=[Skill("two", tools=[tool("search")])])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"skills": Skill("s")}, "Agent 'a': skills must be a list of Skill"),
        ({"skills": ["s"]}, "Agent 'a': skills takes Skill entries"),
        ({"skills": [Skill("s"), Skill("s")]}, "Agent 'a': two skills are named 's'"),
        ({"permissions": ["a"]}, "Agent 'a': permissions must be a ToolPermissions or None"),
        ({"delegation": [define_agent("b")]}, "Agent 'a': delegation must be a Delegation"),
    ],
)
def test_define_agent_refuses_bad_delegation_arguments(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(DefinitionError, match=message):
        define_agent("a", **kwargs)


def test_permissions_hide_refused_tools_and_name_the_rule() -> None:
    agent = define_agent(
        "a",
        tools=[tool("read"), tool("write"), tool("rm")],
        output_schema=Out,
        permissions=ToolPermissions(allow=["read", "rm"], deny=["rm"]),
    )
    assert [spec.name for spec in agent.tool_specs] == ["read", "__finish__"]
    assert [t.name for t in agent.offered_tools] == ["read"]
    assert denied(agent, "read") is None
    assert denied(agent, "__finish__") is None
    assert denied(agent, "rm") == (
        "Tool 'rm' is not permitted for agent 'a': the deny list (rm) names it"
    )
    assert denied(agent, "write") == (
        "Tool 'write' is not permitted for agent 'a': it is not on the allow list (read, rm)"
    )
    assert denied(define_agent("free", tools=[tool("rm")]), "rm") is None


def test_the_registry_knows_the_registered_categories() -> None:
    researcher = define_agent("researcher")
    registry = AgentRegistry([define_agent("boss", delegation=Delegation([researcher]))])
    assert registry.get("researcher") is researcher
    with pytest.raises(DefinitionError, match="Two different agents are named 'researcher'"):
        registry.register(define_agent("researcher"))
