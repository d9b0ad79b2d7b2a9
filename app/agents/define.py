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
from app.agents.companion import companion_tools
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
) -> AgentConfig:
    """Define an agent: its prompt, tools, typed output and state, model and step limit.

    `persistent_agents` gives the agent long-lived children and the companion tools that manage
    them (see app/agents/companion.py).

    Raises `DefinitionError` naming the agent and the offending tool for a bad name, a reserved
    tool name not made by this library, duplicate tool names, a schema that is not a pydantic
    model, or a persistent agent type given twice or without an output schema.
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
    companions = companion_tools(owner, persistent_agents) if persistent_agents else []
    for companion in companions:
        tool_map[companion.name] = companion
    return AgentConfig(
        name=name,
        description=description,
        system_prompt=system_prompt,
        tools=(*tools, *companions),
        output_schema=output_schema,
        state_schema=state_schema,
        model=model,
        max_steps=max_steps,
        persistent_agents=tuple(persistent_agents),
        hooks=hooks or AgentHooks(),
        tool_map=tool_map,
    )
