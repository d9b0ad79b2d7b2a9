"""`AgentRegistry`: every agent a server can start or delegate to, by name."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from pydantic import BaseModel

from app.agents.agent import AgentConfig
from app.agents.subagent import SubAgentTool
from app.errors import AgentNotFoundError, DefinitionError


class AgentRegistry:
    """The agents a runtime knows. Sub-agents reachable through tools, persistent children and
    registered delegation categories are registered too."""

    def __init__(self, agents: Iterable[AgentConfig] = ()) -> None:
        self._agents: dict[str, AgentConfig] = {}
        for agent in agents:
            self.register(agent)

    def register(self, agent: AgentConfig) -> None:
        """Add `agent` and the sub-agents its tools reach; a different agent with a taken name is
        a `DefinitionError`."""
        if not isinstance(agent, AgentConfig):
            raise DefinitionError(f"AgentRegistry takes agents from define_agent, got {agent!r}")
        held = self._agents.get(agent.name)
        if held is agent:
            return
        if held is not None:
            raise DefinitionError(f"Two different agents are named {agent.name!r}")
        self._agents[agent.name] = agent
        for tool in agent.tools:
            if isinstance(tool, SubAgentTool):
                self.register(tool.agent)
        for persistent in agent.persistent_agents:
            self.register(persistent.agent)
        if agent.delegation is not None:
            for entry in agent.delegation.entries:
                self.register(entry.agent)

    def get(self, name: str) -> AgentConfig:
        """The agent named `name`, or `AgentNotFoundError`."""
        try:
            return self._agents[name]
        except KeyError:
            raise AgentNotFoundError(f"Unknown agent type {name!r}") from None

    def input_schema(self, name: str) -> type[BaseModel] | None:
        """The input schema callers give agent `name`: that of the first sub-agent tool wrapping
        it (in the order of the agents, then of their tools), or None when no tool wraps it."""
        for agent in self._agents.values():
            for tool in agent.tools:
                if isinstance(tool, SubAgentTool) and tool.agent.name == name:
                    return tool.input_schema
        return None

    def __contains__(self, name: object) -> bool:
        return name in self._agents

    def __iter__(self) -> Iterator[AgentConfig]:
        return iter(self._agents.values())

    def __len__(self) -> int:
        return len(self._agents)
