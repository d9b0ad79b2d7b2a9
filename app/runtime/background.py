"""The children of a tree that run on their own, not inside a parent's call (non-blocking
persistent children, background `subagent` sessions), found from the store when the tree is
reopened: no parent would reopen them.

A takeover restarts those that were running (or queued) when their server died; a resume,
those an interrupt stopped. They restart before the root does, so a root that makes the call
that started one again finds it running. A background `subagent` session restarts with its
place in the queue. See docs/architecture.md, "Persistent children" and "Background
delegation".
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from app.agents import AgentConfig, AgentRegistry
from app.errors import AgentServerError
from app.protocol import SessionStatus, SubSessionRef
from app.runtime.children import Frame
from app.runtime.outcome import Outcome, Stop
from app.runtime.persistent import ChildTree, detach, open_again
from app.runtime.resolve import child_agent
from app.runtime.tasks import Lane
from app.store import SessionRecord, StateStore


@dataclass(frozen=True, slots=True)
class Background:
    """A child that runs on its own, as stored."""

    record: SessionRecord
    ref: SubSessionRef
    agent: AgentConfig
    parent: SessionRecord


async def background_children(
    store: StateStore,
    registry: AgentRegistry,
    stream_id: str,
    statuses: frozenset[SessionStatus],
) -> list[Background]:
    """The tree's children running on their own whose status is one of `statuses`, oldest
    first."""
    sessions = await store.list_stream_sessions(stream_id)
    by_id = {record.session_id: record for record in sessions}
    agents: dict[str, AgentConfig | None] = {}

    async def agent_of(record: SessionRecord) -> AgentConfig | None:
        if record.session_id in agents:
            return agents[record.session_id]
        found: AgentConfig | None = None
        parent = by_id.get(record.parent_session_id or "")
        try:
            if parent is None:
                found = registry.get(record.agent_type)
            else:
                parent_agent = await agent_of(parent)
                ref = await _ref(store, parent.session_id, record.session_id)
                if parent_agent is not None and ref is not None:
                    found = child_agent(registry, parent_agent, record, ref)
        except (AgentServerError, ValueError):
            found = None
        agents[record.session_id] = found
        return found

    found: list[Background] = []
    for record in sessions:
        parent = by_id.get(record.parent_session_id or "")
        if parent is None or record.status not in statuses:
            continue
        ref = await _ref(store, parent.session_id, record.session_id)
        if ref is None or ref.mode == "ephemeral":
            continue
        parent_agent = await agent_of(parent)
        if parent_agent is None:
            continue
        if ref.mode == "persistent":
            entry = parent_agent.persistent(record.agent_type)
            if entry is None or entry.mode != "non-blocking":
                continue
        agent = await agent_of(record)
        if agent is not None:
            found.append(Background(record, ref, agent, parent))
    return found


async def _ref(store: StateStore, parent_id: str, child_id: str) -> SubSessionRef | None:
    refs = await store.get_sub_session_refs(parent_id)
    return next((ref for ref in refs if ref.sub_session_id == child_id), None)


async def restart(
    tree: ChildTree, child: Background, stop: Stop | None = None
) -> asyncio.Task[Outcome]:
    """Run a background child again from its checkpoint, in its frame (stopped at once with
    `stop`: an interrupt of the tree raised while no one ran it)."""
    parent, record = child.parent, child.record
    if child.ref.mode == "background":
        messages = await tree.store.load_messages(record.session_id)
        entry = await tree.store.queue_entry(record.session_id)
        timeout = None if entry is None or entry.timeout_ms is None else entry.timeout_ms / 1000
        run = tree.new_run(child.agent, record, messages, ref=child.ref)
        run.lane = Lane(tree.scheduler, timeout)
        flag = await tree.store.check_interrupt_flag(record.session_id)
        if flag is not None:
            run.stop(Stop("interrupted", flag.reason))
    else:
        run = await open_again(tree, parent.session_id, child.agent, record, child.ref)
    if stop is not None:
        run.stop(stop)
    frame = Frame(
        parent.session_id,
        parent.agent_type,
        parent.step_count,
        child.ref.parent_tool_call_id,
        record.agent_type,
        record.session_id,
    )
    return detach(tree, run, frame)
