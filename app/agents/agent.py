"""Agent definitions: `define_agent`, its lifecycle hooks and persistent-child settings."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from pydantic import BaseModel

from app.agents.tools import Tool, check_schema, check_tool_name
from app.errors import DefinitionError
from app.models import Model, ToolSpec

if TYPE_CHECKING:
    from app.agents.remote import RemoteSubAgentTool
    from app.agents.subagent import SubAgentTool

AnyTool: TypeAlias = "Tool | SubAgentTool | RemoteSubAgentTool"
"""Any tool an agent can hold: a function tool, or a local or remote sub-agent."""

AGENT_NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_-]{0,53}$"
"""Agent names: short enough that `subagent__<name>` is a valid tool name."""
_AGENT_NAME = re.compile(AGENT_NAME_PATTERN)

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
    """A long-lived child the parent manages with companion tools (seed 001)."""

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

    @cached_property
    def tool_specs(self) -> tuple[ToolSpec, ...]:
        """What the model is offered: the tools, then `__finish__` for typed output."""
        specs = [tool.spec for tool in self.tools]
        if self.output_schema is not None:
            specs.append(
                ToolSpec(
                    FINISH_TOOL_NAME,
                    "Call this when the task is done; the arguments are your final output.",
                    self.output_schema.model_json_schema(),
                )
            )
        return tuple(specs)

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
) -> AgentConfig:
    """Define an agent: its prompt, tools, typed output and state, model and step limit.

    Raises `DefinitionError` naming the agent and the offending tool for a bad name, a reserved
    tool name not made by this library, duplicate tool names, or a schema that is not a pydantic
    model.
    """
    from app.agents.remote import RemoteSubAgentTool
    from app.agents.subagent import SubAgentTool

    if not isinstance(name, str) or not _AGENT_NAME.match(name):
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
    if persistent_agents:
        raise DefinitionError(
            f"{owner}: persistent_agents are not supported yet by this server; use "
            "create_sub_agent_tool for in-process delegation"
        )
    return AgentConfig(
        name=name,
        description=description,
        system_prompt=system_prompt,
        tools=tuple(tools),
        output_schema=output_schema,
        state_schema=state_schema,
        model=model,
        max_steps=max_steps,
        persistent_agents=tuple(persistent_agents),
        hooks=hooks or AgentHooks(),
        tool_map=tool_map,
    )
