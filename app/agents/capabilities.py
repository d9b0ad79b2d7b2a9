"""What an agent can do and pass on to its subagents: skills (named tool bundles), tool
permissions and the inheritance policy of a delegation (seed 004)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Literal

from app.agents.tools import Tool
from app.errors import DefinitionError

ToolConflictPolicy = Literal["skip", "error", "override"]
"""What an inherited tool does to a child's tool of the same name: leave it, refuse, replace it."""
MissingSkillPolicy = Literal["warn", "error"]
"""What an inherited tool the parent lacks does: log a warning and go on, or refuse."""


def names(owner: str, what: str, value: object) -> tuple[str, ...]:
    """`value` as a tuple of non-empty strings, or a `DefinitionError` (a bare string is the
    usual slip: it would iterate as letters)."""
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise DefinitionError(f"{owner}: {what} must be a list of names, got {value!r}")
    items = tuple(value)
    for item in items:
        if not isinstance(item, str) or not item:
            raise DefinitionError(f"{owner}: {what} must hold non-empty names, got {item!r}")
    return items


@dataclass(frozen=True, eq=False)
class Skill:
    """A named bundle of function tools and the prompt text that teaches their use.

    An agent with the skill installed holds its tools; its rendered prompt lists the skill's
    name, description and prompt under `${_installed_skills}`.
    """

    name: str
    _: KW_ONLY
    description: str = ""
    prompt: str = ""
    tools: Sequence[Tool] = ()

    def __post_init__(self) -> None:
        owner = f"Skill {self.name!r}"
        if not isinstance(self.name, str) or not self.name.strip():
            raise DefinitionError(f"Skill name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.description, str) or not isinstance(self.prompt, str):
            raise DefinitionError(f"{owner}: description and prompt must be strings")
        if isinstance(self.tools, str) or not isinstance(self.tools, Sequence):
            raise DefinitionError(f"{owner}: tools must be a list of tools, got {self.tools!r}")
        seen: set[str] = set()
        for tool in self.tools:
            if not isinstance(tool, Tool):
                raise DefinitionError(f"{owner}: {tool!r} is not a function tool (use define_tool)")
            if tool.name in seen:
                raise DefinitionError(f"{owner}: two tools are named {tool.name!r}")
            seen.add(tool.name)
        object.__setattr__(self, "tools", tuple(self.tools))

    def provides(self, tool_name: str) -> bool:
        """Whether one of the skill's tools has that name."""
        return any(tool.name == tool_name for tool in self.tools)


@dataclass(frozen=True)
class ToolPermissions:
    """Which tools an agent may run: those `allow` names (all when None), minus those `deny`
    names. The deny list wins. Finishing (`__finish__`) is never restricted."""

    allow: Sequence[str] | None = None
    deny: Sequence[str] = ()

    def __post_init__(self) -> None:
        if self.allow is not None:
            object.__setattr__(self, "allow", names("ToolPermissions", "allow", self.allow))
        object.__setattr__(self, "deny", names("ToolPermissions", "deny", self.deny))

    def allows(self, name: str) -> bool:
        """Whether a tool of that name may run."""
        return self.refusal(name) is None

    def refusal(self, name: str) -> str | None:
        """Which rule refuses a tool of that name, in words; None when it may run."""
        if name in self.deny:
            return f"the deny list ({', '.join(self.deny)}) names it"
        if self.allow is not None and name not in self.allow:
            listed = ", ".join(self.allow) or "empty"
            return f"it is not on the allow list ({listed})"
        return None

    def restricted_by(self, other: ToolPermissions) -> ToolPermissions:
        """Both sets of rules at once: allowed only where both allow."""
        allow: Sequence[str] | None
        if self.allow is None:
            allow = other.allow
        elif other.allow is None:
            allow = self.allow
        else:
            allow = tuple(name for name in self.allow if name in other.allow)
        deny = (*self.deny, *(name for name in other.deny if name not in self.deny))
        return ToolPermissions(allow=allow, deny=deny)


@dataclass(frozen=True)
class InheritancePolicy:
    """What a subagent takes from the agent that delegates to it (the seed's six fields).

    - `enabled`: master switch; False inherits nothing.
    - `inherit_system_prompt`: the parent's prompt is appended to the child's, after a blank line.
    - `inherit_tools`: the parent tools (by name) the child gets; a tool that comes from one of
      the parent's skills brings that whole skill.
    - `inherit_permissions`: the parent's `ToolPermissions` restrict the child too.
    - `tool_conflict_policy`: an inherited tool named like one the child has: `skip` keeps the
      child's, `error` refuses the delegation, `override` puts the parent's in its place.
    - `missing_skill_policy`: an inherited name the parent has no tool or skill for: `warn` logs
      and goes on without it, `error` refuses the delegation.
    """

    enabled: bool = True
    inherit_system_prompt: bool = True
    inherit_tools: Sequence[str] = ()
    inherit_permissions: bool = False
    tool_conflict_policy: ToolConflictPolicy = "skip"
    missing_skill_policy: MissingSkillPolicy = "warn"

    def __post_init__(self) -> None:
        owner = "InheritancePolicy"
        for flag in ("enabled", "inherit_system_prompt", "inherit_permissions"):
            if not isinstance(getattr(self, flag), bool):
                raise DefinitionError(f"{owner}: {flag} must be True or False")
        object.__setattr__(self, "inherit_tools", names(owner, "inherit_tools", self.inherit_tools))
        if self.tool_conflict_policy not in ("skip", "error", "override"):
            raise DefinitionError(
                f"{owner}: tool_conflict_policy must be 'skip', 'error' or 'override', "
                f"got {self.tool_conflict_policy!r}"
            )
        if self.missing_skill_policy not in ("warn", "error"):
            raise DefinitionError(
                f"{owner}: missing_skill_policy must be 'warn' or 'error', "
                f"got {self.missing_skill_policy!r}"
            )
