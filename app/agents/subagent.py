"""`create_sub_agent_tool`: an agent offered to another agent as a tool named `subagent__<name>`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pydantic_core
from pydantic import BaseModel

from app.agents.agent import AgentConfig
from app.agents.tools import Offered, check_schema
from app.errors import DefinitionError

SUBAGENT_TOOL_PREFIX = "subagent__"
MESSAGE_FIELDS = ("message", "query", "text", "content")
"""The input fields that become the child's first user message, in priority order."""


def input_to_message(input: dict[str, Any]) -> str:
    """The child's first user message: the first string among `MESSAGE_FIELDS`, else the JSON."""
    for key in MESSAGE_FIELDS:
        value = input.get(key)
        if isinstance(value, str):
            return value
    return pydantic_core.to_json(input).decode()  # compact, as json.dumps with "," and ":"


@dataclass(frozen=True, eq=False)
class SubAgentTool(Offered):
    """A tool whose call runs `agent` as a child session and returns its output."""

    agent: AgentConfig
    input_schema: type[BaseModel]
    description: str
    timeout: float | None = None

    @property
    def name(self) -> str:
        """`subagent__<agent name>`."""
        return SUBAGENT_TOOL_PREFIX + self.agent.name


def create_sub_agent_tool(
    agent: AgentConfig,
    input_schema: type[BaseModel],
    *,
    description: str | None = None,
    timeout: float | None = None,
) -> SubAgentTool:
    """Offer `agent` as a tool. The agent needs an `output_schema`: it is what the caller gets.

    The call's input becomes the child's first user message (see `input_to_message`) and its
    initial state input; `timeout` (seconds) bounds the whole child run.
    """
    if not isinstance(agent, AgentConfig):
        raise DefinitionError(
            f"create_sub_agent_tool needs an agent from define_agent, got {agent!r}"
        )
    if agent.output_schema is None:
        raise DefinitionError(
            f"Agent {agent.name!r} cannot be a sub-agent: it has no output_schema "
            "(the output schema is the contract between parent and child)"
        )
    check_schema(f"Sub-agent tool for {agent.name!r}", "input_schema", input_schema)
    if timeout is not None and timeout <= 0:
        raise DefinitionError(f"Sub-agent tool for {agent.name!r}: timeout must be positive")
    return SubAgentTool(
        agent=agent,
        input_schema=input_schema,
        description=description or agent.description or f"Delegate a task to {agent.name}.",
        timeout=timeout,
    )
