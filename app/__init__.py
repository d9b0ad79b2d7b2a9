"""A durable agent server: LLM agents with in-process, parallel, nested and remote sub-agents.

The public API is re-exported here and nothing else (a test pins the names).
"""

from app.agents import (
    AgentRegistry,
    Delegation,
    FreeSubagents,
    InheritancePolicy,
    PersistentAgent,
    Skill,
    Subagent,
    ToolPermissions,
    create_remote_sub_agent_tool,
    create_sub_agent_tool,
    define_agent,
    define_tool,
)
from app.api import create_app
from app.runtime import AgentRuntime
from app.transport import HttpRemoteAgentTransport

__all__ = [
    "AgentRegistry",
    "AgentRuntime",
    "Delegation",
    "FreeSubagents",
    "HttpRemoteAgentTransport",
    "InheritancePolicy",
    "PersistentAgent",
    "Skill",
    "Subagent",
    "ToolPermissions",
    "create_app",
    "create_remote_sub_agent_tool",
    "create_sub_agent_tool",
    "define_agent",
    "define_tool",
]
