"""The child a `subagent` call starts, built from the parent alone: its category's agent (or a
free-form one), its skills, what it inherits under its `InheritancePolicy`, and its timeout.

`build_child` is deterministic in (parent, category, load_skills), so a runtime rebuilds the
same child after a restart from what it stored of the call; its `DelegationError`s are written
for the parent's model, which gets them as the call's tool error.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace

from app.agents.agent import AGENT_NAME, AgentConfig, AgentHooks, AnyTool
from app.agents.capabilities import InheritancePolicy, Skill, ToolPermissions
from app.agents.delegation import FREE_CATEGORY_RULE, Delegation, FreeSubagents
from app.agents.prompts import with_inventory
from app.errors import DelegationError

logger = logging.getLogger(__name__)


@dataclass
class _Child:
    """A child being assembled: the parts `build_child` changes."""

    name: str
    prompt: str
    tools: list[AnyTool]
    skills: list[Skill]
    permissions: ToolPermissions | None

    def install(self, skill: Skill, *, inherited: InheritancePolicy | None = None) -> None:
        """Install `skill` and its tools; an inherited skill's tools follow the policy, another
        skill's tool that clashes with a different tool is refused."""
        if any(held is skill for held in self.skills):
            return
        if any(held.name == skill.name for held in self.skills):
            raise DelegationError(
                f"Subagent {self.name!r} already has another skill named {skill.name!r}"
            )
        for tool in skill.tools:
            if inherited is not None:
                self.inherit(tool, inherited)
            elif self._find(tool.name) not in (None, tool):
                raise DelegationError(
                    f"Skill {skill.name!r} cannot be installed on subagent {self.name!r}: its "
                    f"tool {tool.name!r} clashes with another tool of that name"
                )
            elif self._find(tool.name) is None:
                self.tools.append(tool)
        self.skills.append(skill)

    def inherit(self, tool: AnyTool, policy: InheritancePolicy) -> None:
        """Give the child the parent's `tool`, a clash resolved by `tool_conflict_policy`."""
        held = self._find(tool.name)
        if held is None:
            self.tools.append(tool)
        elif held is tool or policy.tool_conflict_policy == "skip":
            return
        elif policy.tool_conflict_policy == "error":
            raise DelegationError(
                f"Subagent {self.name!r} cannot inherit tool {tool.name!r}: it has its own tool "
                "of that name (tool_conflict_policy='error')"
            )
        else:
            self.tools[self.tools.index(held)] = tool

    def _find(self, name: str) -> AnyTool | None:
        return next((tool for tool in self.tools if tool.name == name), None)


def build_child(parent: AgentConfig, category: str, load_skills: Sequence[str] = ()) -> AgentConfig:
    """The agent a `subagent(category=..., load_skills=...)` call of `parent` runs.

    A registered category wins over a free-form one. Its skills are the category's, then
    `load_skills`, each from the delegation's pool; then it inherits per its policy. Its prompt
    template gets the tools and skills sections it does not place itself (see
    `prompts.with_inventory`); its agent type is the category name.
    """
    delegation = parent.delegation
    if delegation is None:
        raise DelegationError(f"Agent {parent.name!r} does not delegate to subagents")
    entry = delegation.subagent(category)
    if entry is not None:
        base, wanted, policy = entry.agent, entry.skills, entry.inheritance
    elif delegation.free_form is not None:
        if not AGENT_NAME.fullmatch(category):
            raise DelegationError(f"Invalid category {category!r}. {FREE_CATEGORY_RULE}.")
        free = delegation.free_form
        base = _free_form(parent, category, free)
        wanted, policy = free.skills, free.inheritance
    else:
        allowed = ", ".join(delegation.categories)
        raise DelegationError(
            f"Unknown subagent category {category!r}. Allowed categories: {allowed}"
        )
    child = _Child(
        category, base.system_prompt, list(base.tools), list(base.skills), base.permissions
    )
    for name in dict.fromkeys([*wanted, *load_skills]):
        child.install(_pool_skill(delegation, name))
    if policy.enabled:
        _inherit(parent, child, policy)
    tools = tuple(child.tools)
    return replace(
        base,
        name=category,
        system_prompt=with_inventory(child.prompt),
        tools=tools,
        tool_map={tool.name: tool for tool in tools},
        skills=tuple(child.skills),
        permissions=child.permissions,
    )


def _free_form(parent: AgentConfig, category: str, free: FreeSubagents) -> AgentConfig:
    """A free-form category's agent before skills and inheritance: the parent's model, text
    output."""
    return AgentConfig(
        name=category,
        description=f"A free-form {category} subagent.",
        system_prompt=free.prompt_for(category),
        tools=(),
        output_schema=None,
        state_schema=None,
        model=parent.model,
        max_steps=free.max_steps,
        persistent_agents=(),
        hooks=AgentHooks(),
        tool_map={},
    )


def _pool_skill(delegation: Delegation, name: str) -> Skill:
    skill = delegation.skill(name)
    if skill is None:
        available = ", ".join(skill.name for skill in delegation.skills) or "none"
        raise DelegationError(f"Unknown skill {name!r}. Available skills: {available}")
    return skill


def _inherit(parent: AgentConfig, child: _Child, policy: InheritancePolicy) -> None:
    if policy.inherit_system_prompt and parent.system_prompt:
        # The parent's template, not its rendered prompt: its placeholders then describe the
        # child, which is whom the child's prompt is about.
        child.prompt = "\n\n".join(part for part in (child.prompt, parent.system_prompt) if part)
    for name in policy.inherit_tools:
        skill = next((skill for skill in parent.skills if skill.provides(name)), None)
        tool = parent.tool_map.get(name)
        if skill is not None:
            child.install(skill, inherited=policy)
        elif tool is not None:
            child.inherit(tool, policy)
        else:
            problem = (
                f"Subagent {child.name!r} inherits tool {name!r}, but agent {parent.name!r} has "
                "no tool or skill that provides it"
            )
            if policy.missing_skill_policy == "error":
                raise DelegationError(problem)
            logger.warning("%s; going on without it", problem)
    if policy.inherit_permissions and parent.permissions is not None:
        # The parent's rules restrict the child's own, never loosen them.
        held = child.permissions
        child.permissions = (
            parent.permissions if held is None else held.restricted_by(parent.permissions)
        )


def resolve_timeout(
    parent: AgentConfig,
    category: str,
    call_timeout: float | None,
    *,
    runtime_default: float | None = None,
) -> float | None:
    """A child run's time limit in seconds: the call's, else its category's, else the
    delegation's default, else the runtime's, else None (no limit)."""
    if call_timeout is not None:
        return call_timeout
    delegation = parent.delegation
    if delegation is not None:
        entry = delegation.subagent(category)
        if entry is not None and entry.timeout is not None:
            return entry.timeout
        if delegation.default_timeout is not None:
            return delegation.default_timeout
    return runtime_default


def depth_refusal(parent: AgentConfig, depth: int) -> str | None:
    """The tool error for starting a child at delegation `depth` (1: a root's child) beyond
    the parent's `max_depth`; None when it may start."""
    delegation = parent.delegation
    if delegation is None or depth <= delegation.max_depth:
        return None
    return (
        f"Delegation depth limit reached: a subagent here would be {depth} levels deep and "
        f"the limit is {delegation.max_depth}. Do this task yourself."
    )
