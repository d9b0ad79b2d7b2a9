"""An agent as `define_agent` makes it (`AgentConfig`), its lifecycle hooks and persistent-child
settings."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from pydantic import BaseModel

from app.agents.prompts import render_prompt
from app.agents.tools import Tool
from app.errors import DefinitionError
from app.models import Model, ToolSpec

if TYPE_CHECKING:
    from app.agents.capabilities import Skill, ToolPermissions
    from app.agents.companion import CompanionTool
    from app.agents.delegation import Delegation
    from app.agents.delegation_tools import DelegationTool
    from app.agents.remote import RemoteSubAgentTool
    from app.agents.subagent import SubAgentTool

AnyTool: TypeAlias = "Tool | SubAgentTool | RemoteSubAgentTool | CompanionTool | DelegationTool"
"""Any tool an agent can hold: a function tool, a local or remote sub-agent, one of the
companion tools that manage its persistent children, or one of its delegation tools."""

AGENT_NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_-]{0,53}$"
"""Agent names: short enough that `subagent__<name>` is a valid tool name."""
AGENT_NAME = re.compile(AGENT_NAME_PATTERN)
"""`AGENT_NAME_PATTERN`, compiled."""

FINISH_TOOL_NAME = "__finish__"
"""The tool an agent with an `output_schema` calls to finish; its arguments are the output."""


@dataclass(frozen=True, slots=True)
class HookContext:
    """Who a lifecycle hook is about."""

    session_id: str
    agent_type: str
    parent_session_id: str | None
    step: int


Hook = Callable[..., Awaitable[None] | None]
"""A hook: a sync or async function; its exceptions are logged, never fail the run."""


@dataclass(frozen=True, slots=True)
class AgentHooks:
    """Lifecycle hooks. Every agent, sub-agents included, fires its own start/complete/fail.

    - `on_agent_start(ctx)`: a run of the agent starts (or resumes).
    - `on_agent_complete(ctx, output)`: the agent completed with `output`.
    - `on_agent_fail(ctx, error)`: the agent failed with the message `error`.
    - `before_sub_agent(ctx, sub_agent_type, sub_session_id, input)`: on the parent, before a child.
    - `after_sub_agent(ctx, sub_agent_type, sub_session_id, result)`: on the parent, after it.
    """

    on_agent_start: Hook | None = None
    on_agent_complete: Hook | None = None
    on_agent_fail: Hook | None = None
    before_sub_agent: Hook | None = None
    after_sub_agent: Hook | None = None


@dataclass(frozen=True, slots=True)
class PersistentAgent:
    """A long-lived child the parent manages with companion tools: `blocking`, the parent's
    call waits for its output; `non-blocking`, it runs in the background and the parent hears
    of its end in a notice. `description` tells the parent's model what it is for."""

    agent: AgentConfig
    mode: Literal["blocking", "non-blocking"] = "blocking"
    description: str | None = None

    def __post_init__(self) -> None:
        if self.mode not in ("blocking", "non-blocking"):
            raise DefinitionError(
                f"PersistentAgent mode must be 'blocking' or 'non-blocking', got {self.mode!r}"
            )


@dataclass(frozen=True, eq=False)
class AgentConfig:
    """An agent as `define_agent` made it. Compare agents by identity."""

    name: str
    description: str
    system_prompt: str
    tools: tuple[AnyTool, ...]
    output_schema: type[BaseModel] | None
    state_schema: type[BaseModel] | None
    model: Model | None
    max_steps: int
    persistent_agents: tuple[PersistentAgent, ...]
    hooks: AgentHooks
    tool_map: dict[str, AnyTool] = field(repr=False)
    delegation: Delegation | None = None
    """How the agent delegates the seed-004 way (its `subagent` tool and control tools)."""
    skills: tuple[Skill, ...] = ()
    """The skills installed on the agent; their tools are among `tools`."""
    permissions: ToolPermissions | None = None
    """Which of its tools the agent may run; None: all."""

    @cached_property
    def offered_tools(self) -> tuple[AnyTool, ...]:
        """The tools the model is offered: those the permissions allow."""
        if self.permissions is None:
            return self.tools
        return tuple(tool for tool in self.tools if self.permissions.allows(tool.name))

    @cached_property
    def rendered_system_prompt(self) -> str:
        """The system prompt the model reads: `system_prompt` with its inventory placeholders
        (`${_installed_tools}`, `${_installed_skills}`, `${_installed_subagents}`) filled in."""
        return render_prompt(self)

    @cached_property
    def tool_specs(self) -> tuple[ToolSpec, ...]:
        """What the model is offered: the permitted tools, then `__finish__` for typed output."""
        specs = [tool.spec for tool in self.offered_tools]
        if self.output_schema is not None:
            specs.append(
                ToolSpec(
                    FINISH_TOOL_NAME,
                    "Call this when the task is done; the arguments are your final output.",
                    self.output_schema.model_json_schema(),
                )
            )
        return tuple(specs)

    def persistent(self, agent_type: str) -> PersistentAgent | None:
        """This agent's persistent child of that type, if it has one."""
        return next((p for p in self.persistent_agents if p.agent.name == agent_type), None)

    def initial_state(self, input: Any = None) -> BaseModel | dict[str, Any]:
        """The custom state a new session starts with: the schema's defaults, then any input
        fields the schema declares."""
        if self.state_schema is None:
            return {}
        seed = {}
        if isinstance(input, dict):
            seed = {k: v for k, v in input.items() if k in self.state_schema.model_fields}
        return self.state_schema.model_validate(seed)

    def load_state(self, data: dict[str, Any]) -> BaseModel | dict[str, Any]:
        """The custom state from its stored JSON."""
        if self.state_schema is None:
            return dict(data)
        return self.state_schema.model_validate(data)
