"""Which agent runs a stored session. Most sessions run a registered agent of their type, but a
session the `subagent` tool delegated to runs an agent built from its parent's (its category,
skills and inherited capabilities: `build_child`), which no registry holds. It is built again,
the same, from the parent's agent and the call's arguments, which the child's record keeps as
its input. See docs/architecture.md, "Background delegation".
"""

from __future__ import annotations

import functools

from app.agents import AgentConfig, AgentRegistry, build_child
from app.agents.delegation_tools import SubagentInput
from app.ids import task_session_id
from app.protocol import SubSessionRef
from app.store import SessionRecord


@functools.lru_cache(maxsize=1024)
def delegated_agent(parent: AgentConfig, category: str, skills: tuple[str, ...]) -> AgentConfig:
    """The agent a `subagent` call of `parent` starts: one object per call shape, so what is
    cached per agent (its tool kinds) is shared by its sessions."""
    return build_child(parent, category, skills)


def task_agent(parent: AgentConfig, arguments: SubagentInput) -> AgentConfig:
    """The agent of a `subagent` call's child (raises `DelegationError` when it cannot be built)."""
    return delegated_agent(parent, arguments.category, tuple(arguments.load_skills or ()))


def is_task_child(record: SessionRecord, ref: SubSessionRef) -> bool:
    """Whether the session is one a `subagent` call started (its id says so)."""
    parent_id = record.parent_session_id
    return parent_id is not None and record.session_id == task_session_id(
        parent_id, ref.parent_tool_call_id
    )


def child_agent(
    registry: AgentRegistry, parent: AgentConfig, record: SessionRecord, ref: SubSessionRef
) -> AgentConfig:
    """The agent of a child session of a session that runs `parent`."""
    if is_task_child(record, ref):
        return task_agent(parent, SubagentInput.model_validate(record.input))
    if ref.mode == "persistent":
        entry = parent.persistent(record.agent_type)
        if entry is not None:
            return entry.agent
    return registry.get(record.agent_type)
