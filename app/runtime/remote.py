"""A remote sub-agent (`create_remote_sub_agent_tool`): start (or find again) the session on the
other server and copy its stream into the root's, re-sequenced, then return its validated output.

The child's id is `{parent}-remote-{toolCallId}` and doubles as the idempotency key, so a parent
that resumes, after an interrupt or a crash, reconciles rather than starts again: it asks the
remote server for the session's status, resumes it if it was interrupted, and reconnects to its
stream after the `remote.lastSequence` of its ref. That ref is committed together with the
copied chunks, so the two never disagree and no chunk is copied twice.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import BaseModel, JsonValue, ValidationError

from app.agents import RemoteSubAgentTool, input_to_message
from app.errors import RemoteAgentError
from app.ids import remote_session_id
from app.protocol import BaseChunk, RemoteRef, SubSessionRef
from app.runtime.calls import describe_validation_error
from app.runtime.child_kinds import Parent
from app.runtime.children import Children
from app.runtime.outcome import Outcome, Stop, stopped_outcome
from app.runtime.subtree import tell_to_stop
from app.store import RefUpsert, WriteBatch, now_ms

if TYPE_CHECKING:
    from app.protocol.api import SessionStatusView

logger = logging.getLogger(__name__)

_BASE_FIELDS = frozenset({"type", "sequence", "agent_id", "agent_type", "step", "timestamp"})


class RemoteChild:
    """The parent's hold on a remote child: what has been copied of it (`ref`), and its stop,
    which cancels the copying task so that it tells the remote server to stop too."""

    def __init__(self, parent: Parent, task: asyncio.Task[Outcome], ref: SubSessionRef) -> None:
        self.parent = parent
        self.task = task
        self.ref = ref
        self.stopping: Stop | None = None

    def stop(self, stop: Stop) -> None:
        """Stop copying (idempotent); the task then interrupts the remote session, unless this
        process is giving the run up."""
        if self.stopping is None:
            self.stopping = stop
            self.task.cancel()

    def advance(self, **changes: object) -> None:
        """Change the ref; the change is committed with the chunks queued so far."""
        self.ref = self.ref.replaced(changes)
        self.parent.tree.writer.track(RefUpsert(self.parent.session_id, self.ref))


@dataclass(frozen=True, slots=True)
class RemoteDelegation:
    """A remote sub-agent tool's calls, as sessions on the other server."""

    tool: RemoteSubAgentTool

    def agent_type_of(self, child_input: dict[str, JsonValue]) -> str:
        """The remote agent's type."""
        return self.tool.remote_agent_type

    @property
    def input_schema(self) -> type[BaseModel]:
        """What the call's arguments must be."""
        return self.tool.input_schema

    @property
    def outside(self) -> bool:
        """A remote child lives on another server."""
        return True

    def child_id(self, parent_id: str, call_id: str) -> str:
        """`{parent}-remote-{toolCallId}`."""
        return remote_session_id(parent_id, call_id)

    def prepare(
        self, parent: Parent, call_id: str, child_id: str, child_input: dict[str, JsonValue]
    ) -> None:
        """A remote child is started by its own call, once the response has landed."""
        return None

    async def live(
        self,
        children: Children,
        call_id: str,
        child_id: str,
        child_input: dict[str, JsonValue],
        new: bool,
    ) -> Outcome:
        """Start or reconcile the remote session, copy its stream, and read its outcome."""
        parent = children.parent
        tool = self.tool
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
        children.running(child_id, child)
        writer = parent.tree.writer
        try:
            if not new:
                child.ref = await _stored_ref(parent, child_id) or ref
            child.advance(status="running", completed_at=None)
            await writer.commit(WriteBatch())
            try:
                async with asyncio.timeout(tool.timeout):
                    outcome = await self._follow(child, child_input, new)
            except TimeoutError:
                await tell_to_stop(tool, child_id, "The caller's timeout expired")
                outcome = Outcome(
                    "failed",
                    error=f"Remote sub-agent {tool.tool_name!r} timed out after {tool.timeout:g}s",
                )
            except RemoteAgentError as exc:
                outcome = Outcome("failed", error=exc.message)
        except asyncio.CancelledError:
            stop = child.stopping
            if stop is None or stop.reason == "shutdown":
                raise  # this process gives the run up: the remote one goes on, reconciled later
            task.uncancel()
            await tell_to_stop(tool, child_id, stop.message)
            outcome = stopped_outcome(stop)
        finally:
            children.ended(child_id)
        child.advance(status=outcome.status, completed_at=now_ms())
        await writer.commit(WriteBatch())
        return outcome

    async def _follow(
        self, child: RemoteChild, child_input: dict[str, JsonValue], new: bool
    ) -> Outcome:
        transport = self.tool.transport
        child_id = child.ref.sub_session_id
        status = None if new else await transport.get_status(child_id)
        if status is None:
            await transport.start(
                self.tool.remote_agent_type,
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
        return self._outcome(child_id, await transport.get_status(child_id))

    def _outcome(self, child_id: str, final: SessionStatusView | None) -> Outcome:
        if final is None:
            return Outcome("failed", error=f"The remote server lost session {child_id!r}")
        if final.status == "completed":
            try:
                output = self.tool.output_schema.model_validate(final.output)
            except ValidationError as exc:
                return Outcome(
                    "failed",
                    error=f"The remote output does not match the output schema: "
                    f"{describe_validation_error(exc)}",
                )
            return Outcome("completed", output=output.model_dump(mode="json"))
        if final.status == "failed":
            return Outcome("failed", error=final.error or "The remote sub-agent failed")
        if final.status in ("paused_awaiting_client", "terminated"):
            # Paused: the parent suspends with it, and the answer reaches it through the
            # transport. Terminated: the parent's call says so, as for a local child.
            return Outcome(final.status)
        return Outcome("failed", error=f"The remote sub-agent stopped: {final.status}")


def _copy(parent: Parent, chunk: BaseChunk) -> None:
    """Re-emit a remote chunk into the root's stream, keeping its agent and step."""
    fields = {
        name: getattr(chunk, name) for name in type(chunk).model_fields if name not in _BASE_FIELDS
    }
    parent.tree.writer.emit(type(chunk), chunk.agent_id, chunk.agent_type, chunk.step, fields)


async def _stored_ref(parent: Parent, child_id: str) -> SubSessionRef | None:
    for ref in await parent.tree.store.get_sub_session_refs(parent.session_id):
        if ref.sub_session_id == child_id:
            return ref
    return None
