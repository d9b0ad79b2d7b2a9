"""`define_agent`: an agent's definition checked and assembled, tools and all.

It sits apart from `AgentConfig` (agent.py) because it knows every kind of tool, and the
sub-agent tools know agents: each module is read after those it needs.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel

from app.agents.agent import (
    AGENT_NAME,
    AGENT_NAME_PATTERN,
    AgentConfig,
    AgentHooks,
    AnyTool,
    PersistentAgent,
)
from app.agents.capabilities import Skill, ToolPermissions
from app.agents.companion import COMPANION_PREFIX, companion_tools
from app.agents.delegation import Delegation
from app.agents.delegation_tools import TOOL_NAMES, delegation_tools
from app.agents.remote import RemoteSubAgentTool
from app.agents.subagent import SubAgentTool
from app.agents.tools import Tool, check_schema, check_tool_name
from app.errors import DefinitionError
from app.models import Model


def define_agent(
    name: str,
    *,
    description: str = "",
    system_prompt: str = "",
    tools: Sequence[AnyTool] = (),
    output_schema: type[BaseModel] | None = None,
    state_schema: type[BaseModel] | None = None,
    model: Model | None = None,
    max_steps: int = 20,
    persistent_agents: Sequence[PersistentAgent] = (),
    hooks: AgentHooks | None = None,
    delegation: Delegation | None = None,
    skills: Sequence[Skill] = (),
    permissions: ToolPermissions | None = None,
) -> AgentConfig:
    """Define an agent: its prompt, tools, typed output and state, model and step limit.

    `persistent_agents` gives the agent long-lived children and the companion tools that manage
    them (see app/agents/companion.py). `delegation` gives it the `subagent` tool and its
    control tools (app/agents/delegation_tools.py). `skills` are installed on it: their tools
    join its tools. `permissions` restrict which of its tools it may run.

    Raises `DefinitionError` naming the agent and the offending tool for a bad name, a reserved
    tool name not made by this library, duplicate tool names (a delegation tool's name
    included), a schema that is not a pydantic model, a persistent agent type given twice or
    without an output schema, or an inheritance policy that names a tool only the parent can
    hold (a delegation or companion tool).
    """
    if not isinstance(name, str) or not AGENT_NAME.fullmatch(name):
        raise DefinitionError(f"Agent name {name!r} must match {AGENT_NAME_PATTERN}")
    owner = f"Agent {name!r}"
    if output_schema is not None:
        check_schema(owner, "output_schema", output_schema)
    if state_schema is not None:
        check_schema(owner, "state_schema", state_schema)
        try:
            state_schema()
        except Exception as exc:
            raise DefinitionError(
                f"{owner}: every state_schema field needs a default ({exc})"
            ) from exc
    if model is not None and not isinstance(model, Model):
        raise DefinitionError(f"{owner}: model must be an app.models.Model, got {model!r}")
    if not isinstance(max_steps, int) or max_steps < 1:
        raise DefinitionError(f"{owner}: max_steps must be a positive integer, got {max_steps!r}")
    tool_map: dict[str, AnyTool] = {}
    for tool in tools:
        if isinstance(tool, SubAgentTool | RemoteSubAgentTool):
            check_tool_name(tool.name, library=True)
        elif isinstance(tool, Tool):
            try:
                check_tool_name(tool.name)
            except DefinitionError as exc:
                raise DefinitionError(f"{owner}: {exc}") from None
        else:
            raise DefinitionError(f"{owner}: {tool!r} is not a tool (use define_tool)")
        if tool.name in tool_map:
            raise DefinitionError(f"{owner}: two tools are named {tool.name!r}")
        tool_map[tool.name] = tool
    installed = _skills(owner, skills)
    skill_tools: list[AnyTool] = []
    for skill in installed:
        for tool in skill.tools:
            if tool_map.get(tool.name) is tool:
                continue  # the same tool, in the agent's tools or in another of its skills
            if tool.name in tool_map:
                raise DefinitionError(
                    f"{owner}: skill {skill.name!r} brings a second tool named {tool.name!r}"
                )
            tool_map[tool.name] = tool
            skill_tools.append(tool)
    if permissions is not None and not isinstance(permissions, ToolPermissions):
        raise DefinitionError(f"{owner}: permissions must be a ToolPermissions or None")
    companions = companion_tools(owner, persistent_agents) if persistent_agents else []
    for companion in companions:
        tool_map[companion.name] = companion
    delegating = _delegation_tools(owner, delegation, tool_map) if delegation is not None else []
    return AgentConfig(
        name=name,
        description=description,
        system_prompt=system_prompt,
        tools=(*tools, *skill_tools, *companions, *delegating),
        output_schema=output_schema,
        state_schema=state_schema,
        model=model,
        max_steps=max_steps,
        persistent_agents=tuple(persistent_agents),
        hooks=hooks or AgentHooks(),
        tool_map=tool_map,
        delegation=delegation,
        skills=installed,
        permissions=permissions,
    )


def _skills(owner: str, skills: Sequence[Skill]) -> tuple[Skill, ...]:
    if isinstance(skills, Skill) or not isinstance(skills, Sequence):
        raise DefinitionError(f"{owner}: skills must be a list of Skill, got {skills!r}")
    seen: set[str] = set()
    for skill in skills:
        if not isinstance(skill, Skill):
            raise DefinitionError(f"{owner}: skills takes Skill entries, got {skill!r}")
        if skill.name in seen:
            raise DefinitionError(f"{owner}: two skills are named {skill.name!r}")
        seen.add(skill.name)
    return tuple(skills)


def _delegation_tools(
    owner: str, delegation: Delegation, tool_map: dict[str, AnyTool]
) -> list[AnyTool]:
    """The delegation tools, checked against the agent's tools, added to `tool_map`."""
    if not isinstance(delegation, Delegation):
        raise DefinitionError(f"{owner}: delegation must be a Delegation, got {delegation!r}")
    if not delegation.entries and delegation.free_form is None:
        raise DefinitionError(
            f"{owner}: its delegation has no subagents and no free_form: nothing to delegate to"
        )
    made = delegation_tools(delegation)
    for tool in made:
        if tool.name in tool_map:
            raise DefinitionError(
                f"{owner}: tool name {tool.name!r} is taken by the delegation tools "
                f"({', '.join(TOOL_NAMES.values())}); rename yours"
            )
    policies = [(f"subagent {e.category!r}", e.inheritance) for e in delegation.entries]
    if delegation.free_form is not None:
        policies.append(("free-form subagents", delegation.free_form.inheritance))
    for who, policy in policies:
        for name in policy.inherit_tools:
            if name in TOOL_NAMES.values() or name.startswith(COMPANION_PREFIX):
                raise DefinitionError(
                    f"{owner}: the inheritance policy of {who} names {name!r}, a tool made "
                    "for this agent's own children: a subagent cannot inherit it"
                )
    for tool in made:
        tool_map[tool.name] = tool
    return list(made)
