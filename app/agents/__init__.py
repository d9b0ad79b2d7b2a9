"""Defining agents: agents, tools and their context, sub-agent tools, the registry."""

from app.agents.agent import (
    FINISH_TOOL_NAME,
    AgentConfig,
    AgentHooks,
    HookContext,
    PersistentAgent,
)
from app.agents.capabilities import InheritancePolicy, Skill, ToolPermissions
from app.agents.companion import CompanionTool
from app.agents.define import define_agent
from app.agents.delegation import Delegation, FreeSubagents, Subagent, denied
from app.agents.delegation_tools import DelegationTool
from app.agents.inheritance import build_child, depth_refusal, resolve_timeout
from app.agents.registry import AgentRegistry
from app.agents.remote import RemoteAgentTransport, RemoteSubAgentTool, create_remote_sub_agent_tool
from app.agents.subagent import SubAgentTool, create_sub_agent_tool, input_to_message
from app.agents.tools import Tool, ToolContext, define_tool

__all__ = [
    "FINISH_TOOL_NAME",
    "AgentConfig",
    "AgentHooks",
    "AgentRegistry",
    "CompanionTool",
    "Delegation",
    "DelegationTool",
    "FreeSubagents",
    "HookContext",
    "InheritancePolicy",
    "PersistentAgent",
    "RemoteAgentTransport",
    "RemoteSubAgentTool",
    "Skill",
    "SubAgentTool",
    "Subagent",
    "Tool",
    "ToolContext",
    "ToolPermissions",
    "build_child",
    "create_remote_sub_agent_tool",
    "create_sub_agent_tool",
    "define_agent",
    "define_tool",
    "denied",
    "depth_refusal",
    "input_to_message",
    "resolve_timeout",
]
