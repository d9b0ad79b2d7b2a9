"""The persistent children of a tree that run in the background (non-blocking ones), found
from the store when the tree is reopened: they run on their own, not inside a parent's call,
so no parent would reopen them.

A takeover restarts those that were running when their server died; a resume, those an
interrupt stopped. They restart before the root does, so a root that makes the call that
started one again finds it running. See docs/architecture.md, "Persistent children".
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from app.agents import AgentRegistry, PersistentAgent
from app.errors import AgentNotFoundError
from app.protocol import SessionStatus, SubSessionRef
from app.runtime.children import Frame
from app.runtime.outcome import Outcome, Stop
from app.runtime.persistent import ChildTree, detach, open_again
from app.store import SessionRecord, StateStore


@dataclass(frozen=True, slots=True)
class Background:
    """A persistent child that runs on its own, as stored."""

    record: SessionRecord
    ref: SubSessionRef
    entry: PersistentAgent
    parent: SessionRecord


async def background_children(
    store: StateStore,
    registry: AgentRegistry,
    stream_id: str,
    statuses: frozenset[SessionStatus],
) -> list[Background]:
    """The tree's background children whose status is one of `statuses`, oldest first."""
    sessions = await store.list_stream_sessions(stream_id)
    by_id = {record.session_id: record for record in sessions}
    found: list[Background] = []
    for record in sessions:
        parent = by_id.get(record.parent_session_id or "")
        if parent is None or record.status not in statuses:
            continue
        try:
            entry = registry.get(parent.agent_type).persistent(record.agent_type)
        except AgentNotFoundError:
            continue
        if entry is None or entry.mode != "non-blocking":
            continue
        refs = await store.get_sub_session_refs(parent.session_id)
        ref = next((r for r in refs if r.sub_session_id == record.session_id), None)
        if ref is not None and ref.mode == "persistent":
            found.append(Background(record, ref, entry, parent))
    return found


async def restart(
    tree: ChildTree, child: Background, stop: Stop | None = None
) -> asyncio.Task[Outcome]:
    """Run a background child again from its checkpoint, in its frame (stopped at once with
    `stop`: an interrupt of the tree raised while no one ran it)."""
    parent, record = child.parent, child.record
    run = await open_again(tree, parent.session_id, child.entry, record, child.ref)
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
