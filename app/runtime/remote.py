"""Running a remote `subagent__` call: start (or find again) the session on the other server and
copy its stream into the root's, re-sequenced, then return its validated output.

The child's id is `{parent}-remote-{toolCallId}` and doubles as the idempotency key, so a parent
that resumes, after an interrupt or a crash, reconciles rather than starts again: it asks the
remote server for the session's status, resumes it if it was interrupted, and reconnects to its
stream after the `remote.lastSequence` of its ref. That ref is committed together with the
copied chunks, so the two never disagree and no chunk is copied twice.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from pydantic import JsonValue, ValidationError

from app.agents import input_to_message
from app.agents.remote import RemoteSubAgentTool
from app.errors import RemoteAgentError
from app.ids import remote_session_id
from app.protocol import BaseChunk, RemoteRef, SubSessionRef, ToolCall
from app.runtime.calls import CallResult, describe_validation_error
from app.runtime.delegation import delegate
from app.runtime.outcome import Outcome, StopReason, stopped_outcome
from app.runtime.session import SessionRun
from app.store import RefUpsert, WriteBatch, now_ms

if TYPE_CHECKING:
    from app.protocol.api import SessionStatusView

logger = logging.getLogger(__name__)

_BASE_FIELDS = frozenset({"type", "sequence", "agent_id", "agent_type", "step", "timestamp"})
INTERRUPT_GRACE = 5.0
"""Seconds given to telling a remote server to stop, when the parent stops."""


class RemoteChild:
    """The parent's handle on a remote child: what has been copied of it (`ref`), and its stop,
    which cancels the copying task so that it tells the remote server to stop too."""

    def __init__(self, parent: SessionRun, task: asyncio.Task[Outcome], ref: SubSessionRef) -> None:
        self.parent = parent
        self.task = task
        self.ref = ref
        self.stop_reason: StopReason | None = None
        self.stop_message: str | None = None

    def stop(self, reason: StopReason, message: str | None = None) -> None:
        """Stop copying (idempotent); the task then interrupts the remote session, unless this
        process is shutting down."""
        if self.stop_reason is None:
            self.stop_reason, self.stop_message = reason, message
            self.task.cancel()

    def advance(self, **changes: object) -> None:
        """Change the ref; the change is committed with the chunks queued so far."""
        self.ref = self.ref.replaced(changes)
        self.parent.writer.track(RefUpsert(self.parent.session_id, self.ref))


async def run_remote_sub_agent(
    parent: SessionRun, tool: RemoteSubAgentTool, call: ToolCall, fresh: bool
) -> CallResult | None:
    """Run the remote child for `call` and return its outcome as the parent's tool result."""
    assert call.id is not None
    call_id = call.id
    child_id = remote_session_id(parent.session_id, call_id)
    return await delegate(
        parent,
        call,
        tool.input_schema,
        tool.remote_agent_type,
        child_id,
        lambda child_input: _remote_life(parent, tool, call_id, child_id, child_input, fresh),
    )


async def _remote_life(
    parent: SessionRun,
    tool: RemoteSubAgentTool,
    call_id: str,
    child_id: str,
    child_input: dict[str, JsonValue],
    fresh: bool,
) -> Outcome:
    task = asyncio.current_task()
    assert task is not None
    ref = SubSessionRef(
        sub_session_id=child_id,
        agent_type=tool.remote_agent_type,
        parent_tool_call_id=call_id,
        status="running",
        started_at=now_ms(),
        remote=RemoteRef(stream_id=child_id, last_sequence=0),
    )
    child = RemoteChild(parent, task, ref)
    parent.children[child_id] = child
    try:
        if parent.child_stop is not None:
            child.stop(*parent.child_stop)
        if not fresh:
            child.ref = await _stored_ref(parent, child_id) or ref
        child.advance(status="running", completed_at=None)
        await parent.writer.commit(WriteBatch())
        try:
            async with asyncio.timeout(tool.timeout):
                outcome = await _follow(child, tool, child_input, fresh)
        except TimeoutError:
            await _tell_to_stop(tool, child_id, "The caller's timeout expired")
            outcome = Outcome(
                "failed",
                error=f"Remote sub-agent {tool.tool_name!r} timed out after {tool.timeout:g}s",
            )
        except RemoteAgentError as exc:
            outcome = Outcome("failed", error=exc.message)
    except asyncio.CancelledError:
        reason = child.stop_reason
        if reason is None or reason == "shutdown":
            raise  # this process is stopping: the remote run goes on, to be reconciled later
        task.uncancel()
        await _tell_to_stop(tool, child_id, child.stop_message)
        outcome = stopped_outcome(reason, child.stop_message)
    finally:
        parent.children.pop(child_id, None)
    child.advance(status=outcome.status, completed_at=now_ms())
    await parent.writer.commit(WriteBatch())
    return outcome


async def _follow(
    child: RemoteChild, tool: RemoteSubAgentTool, child_input: dict[str, JsonValue], fresh: bool
) -> Outcome:
    """Start or reconcile the remote session, copy its stream, and read its outcome."""
    transport = tool.transport
    child_id = child.ref.sub_session_id
    status = None if fresh else await transport.get_status(child_id)
    if status is None:
        await transport.start(
            tool.remote_agent_type,
            session_id=child_id,
            message=input_to_message(child_input),
            input=child_input,
            parent_session_id=child.parent.session_id,
        )
    elif status.status == "interrupted":
        await transport.resume(child_id)
    assert child.ref.remote is not None
    async for chunk in transport.stream(child_id, child.ref.remote.last_sequence):
        _copy(child.parent, chunk)
        child.advance(remote=RemoteRef(stream_id=child_id, last_sequence=chunk.sequence))
    return _outcome(tool, child_id, await transport.get_status(child_id))


def _copy(parent: SessionRun, chunk: BaseChunk) -> None:
    """Re-emit a remote chunk into the root's stream, keeping its agent and step."""
    fields = {
        name: getattr(chunk, name) for name in type(chunk).model_fields if name not in _BASE_FIELDS
    }
    parent.writer.emit(type(chunk), chunk.agent_id, chunk.agent_type, chunk.step, fields)


def _outcome(tool: RemoteSubAgentTool, child_id: str, final: SessionStatusView | None) -> Outcome:
    if final is None:
        return Outcome("failed", error=f"The remote server lost session {child_id!r}")
    if final.status == "completed":
        try:
            output = tool.output_schema.model_validate(final.output).model_dump(mode="json")
        except ValidationError as exc:
            return Outcome(
                "failed",
                error=f"The remote output does not match the output schema: "
                f"{describe_validation_error(exc)}",
            )
        return Outcome("completed", output=output)
    if final.status == "failed":
        return Outcome("failed", error=final.error or "The remote sub-agent failed")
    return Outcome("failed", error=f"The remote sub-agent stopped: {final.status}")


async def _stored_ref(parent: SessionRun, child_id: str) -> SubSessionRef | None:
    for ref in await parent.runtime.store.get_sub_session_refs(parent.session_id):
        if ref.sub_session_id == child_id:
            return ref
    return None


async def _tell_to_stop(tool: RemoteSubAgentTool, child_id: str, reason: str | None) -> None:
    """Best effort: a remote server that cannot be told is left to its own run."""
    try:
        async with asyncio.timeout(INTERRUPT_GRACE):
            await tool.transport.interrupt(child_id, reason)
    except (RemoteAgentError, TimeoutError) as exc:
        logger.warning("Could not interrupt remote session %s: %s", child_id, exc)
