"""A session's descendants as the store holds them, for the ends that must reach those this
process does not run: an interrupt of a run taken over from a server that died (its children
were never reopened here), or a tree failed because the store refused one of its writes.

In-memory children record their own ends; everything else below a stopping session that the
store still has `running` is ended here, in the stopping session's own write.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from app.agents import RemoteSubAgentTool
from app.errors import AgentServerError, RemoteAgentError, SessionNotFoundError
from app.runtime.outcome import Outcome
from app.store import RefUpsert, SessionRecord, StateStore, WriteBatch

logger = logging.getLogger(__name__)

INTERRUPT_GRACE = 5.0
"""Seconds given to telling a remote server to stop a session."""

if TYPE_CHECKING:
    from app.agents import AgentRegistry
    from app.protocol import SubSessionRef


async def descendants(store: StateStore, session_id: str) -> list[str]:
    """The ids of every session below `session_id`, as its refs (and theirs) record them."""
    found: list[str] = []
    parents = [session_id]
    while parents:
        refs = await store.get_sub_session_refs(parents.pop())
        children = [ref.sub_session_id for ref in refs]
        found += children
        parents += children
    return found


async def close_subtree(
    store: StateStore,
    registry: AgentRegistry,
    session: SessionRecord,
    outcome: Outcome,
    batch: WriteBatch,
    now: int,
) -> None:
    """Add to `batch` the end (`outcome`) of every descendant of `session` the store still has
    running, with their refs; remote ones are told to stop too (best effort)."""
    parents = [session]
    while parents:
        parent = parents.pop()
        for ref in await store.get_sub_session_refs(parent.session_id):
            if ref.status != "running":
                continue
            if ref.remote is None:
                try:
                    child = await store.get_session(ref.sub_session_id)
                except SessionNotFoundError:
                    continue
                if child.status != "running":
                    continue
                batch.updated_sessions.append(
                    child.evolve(
                        status=outcome.status,
                        error=outcome.error,
                        failure_reason=outcome.failure_reason,
                        updated_at=now,
                    )
                )
                parents.append(child)
            else:
                await _stop_remote(registry, parent, ref, outcome.error)
            ended = ref.replaced({"status": outcome.status, "completed_at": now})
            batch.refs.append(RefUpsert(parent.session_id, ended))


async def _stop_remote(
    registry: AgentRegistry, parent: SessionRecord, ref: SubSessionRef, reason: str | None
) -> None:
    """Ask the server of a remote child to stop it: through the transports of the parent's
    remote tools for its agent type (the ref does not say which tool started it)."""
    try:
        agent = registry.get(parent.agent_type)
    except AgentServerError:
        return
    for tool in agent.tools:
        if isinstance(tool, RemoteSubAgentTool) and tool.remote_agent_type == ref.agent_type:
            await tell_to_stop(tool, ref.sub_session_id, reason)


async def tell_to_stop(tool: RemoteSubAgentTool, child_id: str, reason: str | None) -> None:
    """Ask the remote server to stop the child, best effort: a server that cannot be told in
    time is left to its own run."""
    try:
        async with asyncio.timeout(INTERRUPT_GRACE):
            await tool.transport.interrupt(child_id, reason)
    except (RemoteAgentError, TimeoutError) as exc:
        logger.warning("Could not interrupt remote session %s: %s", child_id, exc)
