"""How an agent delegates the seed-004 way: the categories of subagent it may start (registered
ones, and free-form ones when enabled), the skill pool they draw from, and their limits.

`define_agent(..., delegation=Delegation(...))` gives the agent the `subagent` tool and its
control tools (app/agents/delegation_tools.py); `build_child` (app/agents/inheritance.py) makes
the child a call asks for. Running them is the runtime's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass, field

from app.agents.agent import AGENT_NAME_PATTERN, FINISH_TOOL_NAME, AgentConfig
from app.agents.capabilities import InheritancePolicy, Skill, names
from app.agents.results import ENVELOPE_INSTRUCTIONS
from app.errors import DefinitionError

DEFAULT_FREE_PROMPT = (
    "You are a {category} subagent: a focused worker another agent started for one task in "
    "your area. Do the task you are given with the tools you have, then answer with the result "
    "itself: your final message is all the other agent receives.\n\n" + ENVELOPE_INSTRUCTIONS
)
"""The system prompt of a free-form subagent; `{category}` becomes its category name."""


def _timeout(owner: str, what: str, value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise DefinitionError(f"{owner}: {what} must be a positive number, got {value!r}")
    if not math.isfinite(value):
        raise DefinitionError(f"{owner}: {what} must be finite (None for no limit)")


@dataclass(frozen=True, eq=False)
class Subagent:
    """A registered subagent category: `agent` runs it, under the category name `agent.name`.

    `description` (else the agent's own) tells the parent's model what it is for; `skills`
    names skills of the delegation's pool every child of the category gets; `inheritance`
    says what it takes from the parent; `timeout` (seconds) bounds each run unless the call
    sets its own.
    """

    agent: AgentConfig
    _: KW_ONLY
    description: str | None = None
    skills: Sequence[str] = ()
    inheritance: InheritancePolicy = field(default_factory=InheritancePolicy)
    timeout: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.agent, AgentConfig):
            raise DefinitionError(f"Subagent needs an agent from define_agent, got {self.agent!r}")
        owner = f"Subagent {self.agent.name!r}"
        if self.description is not None and not isinstance(self.description, str):
            raise DefinitionError(f"{owner}: description must be a string")
        object.__setattr__(self, "skills", names(owner, "skills", self.skills))
        if not isinstance(self.inheritance, InheritancePolicy):
            raise DefinitionError(f"{owner}: inheritance must be an InheritancePolicy")
        _timeout(owner, "timeout", self.timeout)

    @property
    def category(self) -> str:
        """The category name: the agent's name."""
        return self.agent.name

    @property
    def summary(self) -> str:
        """What the category is for, as the parent's model reads it."""
        return self.description or self.agent.description or "no description"


@dataclass(frozen=True)
class FreeSubagents:
    """Free-form categories, opt-in: a category no subagent is registered under starts a child
    built from the parent's model with this `system_prompt` (`{category}` replaced), these
    `skills` (names in the delegation's pool), `inheritance` and `max_steps`. Its output is its
    final text."""

    _: KW_ONLY
    system_prompt: str = DEFAULT_FREE_PROMPT
    skills: Sequence[str] = ()
    inheritance: InheritancePolicy = field(default_factory=InheritancePolicy)
    max_steps: int = 20

    def __post_init__(self) -> None:
        owner = "FreeSubagents"
        if not isinstance(self.system_prompt, str):
            raise DefinitionError(f"{owner}: system_prompt must be a string")
        object.__setattr__(self, "skills", names(owner, "skills", self.skills))
        if not isinstance(self.inheritance, InheritancePolicy):
            raise DefinitionError(f"{owner}: inheritance must be an InheritancePolicy")
        if isinstance(self.max_steps, bool) or not isinstance(self.max_steps, int):
            raise DefinitionError(f"{owner}: max_steps must be a positive integer")
        if self.max_steps < 1:
            raise DefinitionError(f"{owner}: max_steps must be a positive integer")

    def prompt_for(self, category: str) -> str:
        """The system prompt of the free-form category `category`."""
        # Plain replacement, not str.format: a prompt may hold other braces (JSON examples).
        return self.system_prompt.replace("{category}", category)


@dataclass(frozen=True, eq=False)
class Delegation:
    """An agent's delegation: its registered `subagents` (a `Subagent` or a bare agent each),
    the `skills` pool that `Subagent.skills`, `FreeSubagents.skills` and a call's `load_skills`
    draw from, free-form categories when `free_form` is given, the `default_timeout` of a run
    (seconds) and `max_depth`, how many levels of delegation a tree may nest."""

    subagents: Sequence[Subagent | AgentConfig] = ()
    _: KW_ONLY
    skills: Sequence[Skill] = ()
    free_form: FreeSubagents | None = None
    default_timeout: float | None = None
    max_depth: int = 3

    def __post_init__(self) -> None:
        owner = "Delegation"
        if isinstance(self.subagents, Subagent | AgentConfig) or not isinstance(
            self.subagents, Sequence
        ):
            raise DefinitionError(f"{owner}: subagents must be a list, got {self.subagents!r}")
        entries = tuple(
            Subagent(entry) if isinstance(entry, AgentConfig) else entry for entry in self.subagents
        )
        categories: set[str] = set()
        for entry in entries:
            if not isinstance(entry, Subagent):
                raise DefinitionError(
                    f"{owner}: subagents takes Subagent entries or agents, got {entry!r}"
                )
            if entry.category in categories:
                raise DefinitionError(f"{owner}: two subagents are named {entry.category!r}")
            categories.add(entry.category)
        if isinstance(self.skills, Skill) or not isinstance(self.skills, Sequence):
            raise DefinitionError(f"{owner}: skills must be a list of Skill, got {self.skills!r}")
        pool: set[str] = set()
        for skill in self.skills:
            if not isinstance(skill, Skill):
                raise DefinitionError(f"{owner}: skills takes Skill entries, got {skill!r}")
            if skill.name in pool:
                raise DefinitionError(f"{owner}: two skills are named {skill.name!r}")
            pool.add(skill.name)
        if self.free_form is not None and not isinstance(self.free_form, FreeSubagents):
            raise DefinitionError(f"{owner}: free_form must be a FreeSubagents or None")
        wanted = [(f"Subagent {e.category!r}", e.skills) for e in entries]
        if self.free_form is not None:
            wanted.append(("FreeSubagents", self.free_form.skills))
        for who, skills in wanted:
            for skill_name in skills:
                if skill_name not in pool:
                    raise DefinitionError(
                        f"{owner}: {who} names skill {skill_name!r}, which is not in the "
                        f"skills pool ({', '.join(sorted(pool)) or 'empty'})"
                    )
        for entry in entries:
            _check_skill_tools(entry, [s for s in self.skills if s.name in entry.skills])
        _timeout(owner, "default_timeout", self.default_timeout)
        if isinstance(self.max_depth, bool) or not isinstance(self.max_depth, int):
            raise DefinitionError(f"{owner}: max_depth must be a positive integer")
        if self.max_depth < 1:
            raise DefinitionError(f"{owner}: max_depth must be a positive integer")
        object.__setattr__(self, "subagents", entries)
        object.__setattr__(self, "skills", tuple(self.skills))

    @property
    def entries(self) -> tuple[Subagent, ...]:
        """The registered subagents, in order."""
        return tuple(entry for entry in self.subagents if isinstance(entry, Subagent))

    @property
    def categories(self) -> tuple[str, ...]:
        """The registered category names, in order."""
        return tuple(entry.category for entry in self.entries)

    def subagent(self, category: str) -> Subagent | None:
        """The subagent registered under `category`, if any."""
        return next((entry for entry in self.entries if entry.category == category), None)

    def skill(self, name: str) -> Skill | None:
        """The pool's skill of that name, if any."""
        return next((skill for skill in self.skills if skill.name == name), None)


def _check_skill_tools(entry: Subagent, skills: Sequence[Skill]) -> None:
    """A category's skills may not bring a tool named like another its agent holds: every
    call of the category would be refused."""
    held: dict[str, object] = dict(entry.agent.tool_map)
    for skill in skills:
        for tool in skill.tools:
            if held.setdefault(tool.name, tool) is not tool:
                raise DefinitionError(
                    f"Delegation: skill {skill.name!r} of subagent {entry.category!r} brings a "
                    f"tool named {tool.name!r}, and the subagent already has another"
                )


FREE_CATEGORY_RULE = (
    f"Free-form category names start with a letter and use letters, digits, '-' and '_' "
    f"(at most 54 characters: {AGENT_NAME_PATTERN})"
)
"""What a free-form category name must be: it becomes the child's agent type."""


def denied(agent: AgentConfig, tool_name: str) -> str | None:
    """The tool error for a call of `tool_name` the agent's permissions refuse, naming the
    rule; None when the call may run. `__finish__` is never refused."""
    if agent.permissions is None or tool_name == FINISH_TOOL_NAME:
        return None
    rule = agent.permissions.refusal(tool_name)
    if rule is None:
        return None
    return f"Tool {tool_name!r} is not permitted for agent {agent.name!r}: {rule}"
