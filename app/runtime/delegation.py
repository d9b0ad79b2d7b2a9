"""Running a `subagent__` call: the child session, its ref, and its chunks in the root's stream.

The child's id is `{parent}-sub-{toolCallId}`, so a parent that resumes a step finds the children
that step started: a completed child's output is used as it is, an interrupted or running one
resumes from its own checkpoint, and only a missing one runs from scratch (`_settled`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, JsonValue

from app.agents import SubAgentTool, input_to_message
from app.errors import SessionNotFoundError
from app.ids import sub_session_id
from app.protocol import (
    SubagentEndChunk,
    SubagentStartChunk,
    SubSessionRef,
    ToolCall,
    UserMessage,
)
from app.runtime.calls import CallResult, parse_arguments
from app.runtime.hooks import fire
from app.runtime.outcome import Outcome, stopped_outcome
from app.runtime.session import SessionRun
from app.store import MessageAppend, RefUpsert, SessionRecord, WriteBatch, now_ms

if TYPE_CHECKING:
    from app.agents import AgentConfig


def failure_result(error: str) -> dict[str, JsonValue]:
    """The tool result a parent gets for a child that did not complete."""
    return {"success": False, "error": error}


async def run_sub_agent(
    parent: SessionRun, tool: SubAgentTool, call: ToolCall, fresh: bool
) -> CallResult | None:
    """Run the local child for `call` and return its outcome as the parent's tool result."""
    assert call.id is not None
    call_id = call.id
    child_id = sub_session_id(parent.session_id, call_id)
    return await delegate(
        parent,
        call,
        tool.input_schema,
        tool.agent.name,
        child_id,
        lambda child_input: _child_life(parent, tool, call_id, child_id, child_input, fresh),
    )


async def delegate(
    parent: SessionRun,
    call: ToolCall,
    input_schema: type[BaseModel],
    agent_type: str,
    child_id: str,
    life: Callable[[dict[str, JsonValue]], Coroutine[Any, Any, Outcome]],
) -> CallResult | None:
    """Run a child for `call` (local or remote: `life` runs it on its validated input), framed in
    the parent's stream (subagent_start ... subagent_end) with the parent's hooks, and turn its
    outcome into the parent's tool result. None when the child was dropped because the parent
    suspended: the call stays unanswered, to run again on resume."""
    assert call.id is not None
    call_id = call.id
    parsed = parse_arguments(call.name, input_schema, call.arguments)
    if isinstance(parsed, CallResult):
        return parsed
    child_input = parsed.model_dump(mode="json")
    hooks = parent.agent.hooks
    await fire(hooks.before_sub_agent, parent.hook_context(), agent_type, child_id, child_input)
    parent.emit(
        SubagentStartChunk, sub_agent_type=agent_type, sub_session_id=child_id, call_id=call_id
    )
    # The child's whole life runs in a task of its own, shielded from this call's cancellation:
    # when the parent stops, the child still records its own stop, even one still being created.
    task = asyncio.get_running_loop().create_task(life(child_input))
    parent.child_tasks.add(task)
    task.add_done_callback(parent.child_tasks.discard)
    outcome = await asyncio.shield(task)
    if outcome.status == "completed":
        result = CallResult(result=outcome.output)
    elif outcome.status == "terminated":
        result = CallResult(
            result=failure_result("The sub-agent was terminated"),
            error="The sub-agent was terminated",
        )
    else:
        error = outcome.error or f"The sub-agent ended {outcome.status}"
        result = CallResult(result=failure_result(error), error=error)
    parent.emit(
        SubagentEndChunk,
        sub_agent_type=agent_type,
        sub_session_id=child_id,
        call_id=call_id,
        result=result.result,
    )
    await fire(hooks.after_sub_agent, parent.hook_context(), agent_type, child_id, result.result)
    return None if outcome.failure_reason == "parent_suspended" else result


def _settled(existing: SessionRecord | None) -> Outcome | None:
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


@dataclass(frozen=True, slots=True)
class NewChild:
    """A child session made ready to be stored: its record, first message and ref."""

    record: SessionRecord
    first: UserMessage
    ref: SubSessionRef

    def add_to(self, batch: WriteBatch, *, existing: bool = False) -> None:
        """Write the child in `batch` (over an existing session, its conversation cleared)."""
        child_id = self.record.session_id
        if existing:
            batch.cleared_messages.append(child_id)
            batch.updated_sessions.append(self.record)
        else:
            batch.new_sessions.append(self.record)
        batch.messages.append(MessageAppend(child_id, 0, self.first))
        assert self.record.parent_session_id is not None
        batch.refs.append(RefUpsert(self.record.parent_session_id, self.ref))

    def run(self, parent: SessionRun, agent: AgentConfig) -> SessionRun:
        """The child's run, once it is stored."""
        return SessionRun(
            parent.runtime,
            agent,
            self.record,
            [self.first],
            parent.writer,
            parent=parent,
            ref=self.ref,
        )


def new_child(
    parent: SessionRun,
    agent: AgentConfig,
    call_id: str,
    child_id: str,
    child_input: dict[str, JsonValue],
) -> NewChild:
    """A fresh child session for `call_id`, running from its first message."""
    now = now_ms()
    state = agent.initial_state(child_input)
    record = SessionRecord(
        session_id=child_id,
        agent_type=agent.name,
        stream_id=parent.record.stream_id,
        status="running",
        created_at=now,
        updated_at=now,
        parent_session_id=parent.session_id,
        state=state.model_dump(mode="json") if isinstance(state, BaseModel) else state,
        input=child_input,
    )
    ref = SubSessionRef.trusted(
        {
            "sub_session_id": child_id,
            "agent_type": agent.name,
            "parent_tool_call_id": call_id,
            "status": "running",
            "started_at": now,
        }
    )
    first = UserMessage.trusted({"content": input_to_message(child_input)})
    return NewChild(record, first, ref)


def open_children(parent: SessionRun, calls: Sequence[ToolCall]) -> dict[str, NewChild]:
    """The local children a model response starts, made ready to be stored with the response
    itself (one write for both), keyed by child id."""
    children = {}
    for call in calls:
        tool = parent.agent.tool_map.get(call.name)
        if not isinstance(tool, SubAgentTool) or call.id is None:
            continue
        parsed = parse_arguments(call.name, tool.input_schema, call.arguments)
        if isinstance(parsed, CallResult):
            continue
        child_id = sub_session_id(parent.session_id, call.id)
        children[child_id] = new_child(
            parent, tool.agent, call.id, child_id, parsed.model_dump(mode="json")
        )
    return children


async def _open_child(
    parent: SessionRun,
    agent: AgentConfig,
    call_id: str,
    child_id: str,
    child_input: dict[str, JsonValue],
    existing: SessionRecord | None,
) -> SessionRun:
    """Create the child session, or reopen an interrupted, paused or running one."""
    # A child dropped because its parent suspended starts again from scratch (seed 002).
    if existing is None or existing.failure_reason == "parent_suspended":
        fresh = new_child(parent, agent, call_id, child_id, child_input)
        batch = WriteBatch()
        fresh.add_to(batch, existing=existing is not None)
        await parent.writer.commit(batch)
        return fresh.run(parent, agent)
    now = now_ms()
    ref = SubSessionRef(
        sub_session_id=child_id,
        agent_type=agent.name,
        parent_tool_call_id=call_id,
        status="running",
        started_at=existing.created_at,
    )
    messages = await parent.runtime.store.load_messages(child_id)
    record = existing.evolve(status="running", error=None, failure_reason=None, updated_at=now)
    batch = WriteBatch(updated_sessions=[record], refs=[RefUpsert(parent.session_id, ref)])
    await parent.writer.commit(batch)
    return SessionRun(
        parent.runtime, agent, record, messages, parent.writer, parent=parent, ref=ref
    )


async def _child_life(
    parent: SessionRun,
    tool: SubAgentTool,
    call_id: str,
    child_id: str,
    child_input: dict[str, JsonValue],
    fresh: bool,
) -> Outcome:
    """Find, create or reopen the child, then run it to an outcome."""
    opened = parent.opened.pop(child_id, None)
    if opened is not None:
        child = opened.run(parent, tool.agent)
    else:
        existing = None
        if not fresh:
            try:
                existing = await parent.runtime.store.get_session(child_id)
            except SessionNotFoundError:
                existing = None
        settled = _settled(existing)
        if settled is not None:
            return settled
        if existing is None and parent.child_stop is not None:
            return stopped_outcome(*parent.child_stop)
        child = await _open_child(parent, tool.agent, call_id, child_id, child_input, existing)
    parent.children[child_id] = child
    if parent.child_stop is not None:
        child.stop(*parent.child_stop)
    timer = None
    if tool.timeout is not None:
        timer = asyncio.get_running_loop().call_later(
            tool.timeout,
            child.stop,
            "timeout",
            f"Sub-agent {tool.agent.name!r} timed out after {tool.timeout:g}s",
        )
    try:
        return await child.run()
    finally:
        parent.children.pop(child_id, None)
        if timer is not None:
            timer.cancel()
