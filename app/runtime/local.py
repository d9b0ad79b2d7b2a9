"""A local sub-agent (`subagent__<name>` over `create_sub_agent_tool`): a child session in this
process, in its root's stream.

The child's id is `{parent}-sub-{toolCallId}`, so a parent that resumes a step finds the children
that step started: a completed child's output is used as it is, an interrupted or running one
resumes from its own checkpoint, and only a missing one runs from scratch (`settled`). A child
dropped because its parent suspended starts again from scratch, superseding its old subtree.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, JsonValue

from app.agents import AgentConfig, SubAgentTool, input_to_message
from app.errors import SessionNotFoundError
from app.ids import sub_session_id
from app.protocol import SessionStatus, SubSessionRef, UserMessage
from app.runtime.child_kinds import Parent, Run
from app.runtime.children import Children
from app.runtime.outcome import Outcome, Stop, stopped_outcome
from app.runtime.steps import dump_state, new_record
from app.runtime.subtree import descendants
from app.store import MessageAppend, RefUpsert, SessionRecord, StateStore, WriteBatch, now_ms


@dataclass(frozen=True, slots=True)
class NewChild:
    """A child session made ready to be stored: its record, first message and ref."""

    record: SessionRecord
    first: UserMessage
    ref: SubSessionRef
    agent: AgentConfig
    superseded: Sequence[str] | None = None
    """The subtree of an earlier session of the same id this one replaces (its descendants)."""

    def add_to(self, batch: WriteBatch) -> None:
        """Write the child in `batch`; over an earlier session of its id, that conversation
        and subtree are deleted."""
        child_id = self.record.session_id
        if self.superseded is not None:
            batch.deleted_sessions.extend(self.superseded)
            batch.cleared_messages.append(child_id)
            batch.updated_sessions.append(self.record)
        else:
            batch.new_sessions.append(self.record)
        batch.messages.append(MessageAppend(child_id, 0, self.first))
        assert self.record.parent_session_id is not None
        batch.refs.append(RefUpsert(self.record.parent_session_id, self.ref))

    def start(self, parent: Parent) -> Run:
        """The child's run, once it is stored."""
        return parent.child_run(self.agent, self.record, [self.first], self.ref)


def new_child(
    parent: Parent,
    agent: AgentConfig,
    call_id: str,
    child_id: str,
    child_input: dict[str, JsonValue],
    *,
    superseded: Sequence[str] | None = None,
    message: str | None = None,
    background: bool = False,
) -> NewChild:
    """A fresh child session for `call_id`, running from its first message (`message`, else
    made from the input); a `background` one waits in the queue for a slot first."""
    now = now_ms()
    status: SessionStatus = "queued" if background else "running"
    record = new_record(
        agent.name,
        child_id,
        stream_id=parent.record.stream_id,
        state=dump_state(agent.initial_state(child_input)),
        input=child_input,
        now=now,
        parent_session_id=parent.session_id,
    ).evolve(status=status)
    ref = SubSessionRef.trusted(
        {
            "sub_session_id": child_id,
            "agent_type": agent.name,
            "parent_tool_call_id": call_id,
            "status": status,
            "started_at": now,
            "mode": "background" if background else "ephemeral",
        }
    )
    content = input_to_message(child_input) if message is None else message
    first = UserMessage.trusted({"content": content})
    return NewChild(record, first, ref, agent, superseded)


def settled(existing: SessionRecord | None) -> Outcome | None:
    """The outcome of a child that must not run again, or None when it should (re)run."""
    if existing is None:
        return None
    if existing.status == "completed":
        return Outcome("completed", output=existing.output)
    if existing.status == "terminated":
        return Outcome("terminated")
    if existing.status == "failed" and existing.failure_reason != "parent_suspended":
        return Outcome("failed", error=existing.error)
    return None


async def stored(store: StateStore, session_id: str) -> SessionRecord | None:
    """The stored session, or None."""
    try:
        return await store.get_session(session_id)
    except SessionNotFoundError:
        return None


@dataclass(frozen=True, slots=True)
class LocalDelegation:
    """A sub-agent tool's calls, as local children."""

    tool: SubAgentTool

    @property
    def input_schema(self) -> type[BaseModel]:
        """What the call's arguments must be."""
        return self.tool.input_schema

    @property
    def outside(self) -> bool:
        """A local child is in this process's store."""
        return False

    def agent_type_of(self, child_input: dict[str, JsonValue]) -> str:
        """The child's agent type."""
        return self.tool.agent.name

    def child_id(self, parent_id: str, call_id: str) -> str:
        """`{parent}-sub-{toolCallId}`."""
        return sub_session_id(parent_id, call_id)

    def prepare(
        self, parent: Parent, call_id: str, child_id: str, child_input: dict[str, JsonValue]
    ) -> NewChild:
        """A local child is stored with the response that starts it."""
        return new_child(parent, self.tool.agent, call_id, child_id, child_input)

    async def live(
        self,
        children: Children,
        call_id: str,
        child_id: str,
        child_input: dict[str, JsonValue],
        new: bool,
    ) -> Outcome:
        """Find, create or reopen the child, then run it to an outcome."""
        child = LocalChild(self.tool.agent, call_id, child_id, child_input)
        return await child.live(children, new, self.tool.timeout)


@dataclass(frozen=True, slots=True)
class LocalChild:
    """A local child of one call, run inside it: what `live` finds, starts or reopens."""

    agent: AgentConfig
    call_id: str
    child_id: str
    child_input: dict[str, JsonValue]
    message: str | None = None
    """Its first message, when not made from its input."""

    async def live(self, children: Children, new: bool, timeout: float | None) -> Outcome:
        """Find, create or reopen the child, then run it to an outcome, stopped after
        `timeout` seconds if it has one. `new`: no session of it can exist yet."""
        parent = children.parent
        child_id = self.child_id
        prepared = children.take_prepared(child_id)
        if prepared is not None:
            child = prepared.start(parent)
        else:
            existing = None if new else await stored(parent.tree.store, child_id)
            done = settled(existing)
            if done is not None:
                return done
            if existing is None and children.stopped is not None:
                return stopped_outcome(children.stopped)
            child = await self._open(parent, existing)
        children.running(child_id, child)
        timer = None
        if timeout is not None:
            message = f"Sub-agent {self.agent.name!r} timed out after {timeout:g}s"
            timer = asyncio.get_running_loop().call_later(
                timeout, child.stop, Stop("timeout", message)
            )
        try:
            return await child.run()
        finally:
            children.ended(child_id)
            if timer is not None:
                timer.cancel()

    async def _open(self, parent: Parent, existing: SessionRecord | None) -> Run:
        """Create the child session, or reopen an interrupted, paused or running one."""
        store = parent.tree.store
        agent, child_id = self.agent, self.child_id
        if existing is None or existing.failure_reason == "parent_suspended":
            superseded = None if existing is None else await descendants(store, child_id)
            fresh = new_child(
                parent,
                agent,
                self.call_id,
                child_id,
                self.child_input,
                superseded=superseded,
                message=self.message,
            )
            batch = WriteBatch()
            fresh.add_to(batch)
            await parent.tree.writer.commit(batch)
            return fresh.start(parent)
        ref = SubSessionRef(
            sub_session_id=child_id,
            agent_type=agent.name,
            parent_tool_call_id=self.call_id,
            status="running",
            started_at=existing.created_at,
        )
        messages = await store.load_messages(child_id)
        record = existing.evolve(
            status="running", error=None, failure_reason=None, updated_at=now_ms()
        )
        batch = WriteBatch(updated_sessions=[record], refs=[RefUpsert(parent.session_id, ref)])
        await parent.tree.writer.commit(batch)
        child = parent.child_run(agent, record, messages, ref)
        # An interrupt asked of the child while no process ran it (its server died) stops it now.
        flag = await store.check_interrupt_flag(child_id)
        if flag is not None:
            child.stop(Stop("interrupted", flag.reason))
        return child
