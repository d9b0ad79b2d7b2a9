"""The children of one session, kept by one object (`Children`): it frames a delegated call in the
stream, runs the child's life in a task of its own, tracks the children running, gives them the
session's stops, and settles them. Each kind of child (a local sub-agent, a remote one) is a
`Delegation` that plugs in (app/runtime/child_kinds.py); nothing else touches a session's child
bookkeeping.

See docs/architecture.md, "Children".
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import JsonValue

from app import observability
from app.protocol import SubagentEndChunk, SubagentStartChunk, SubSessionRef, ToolCall
from app.runtime.calls import CallResult, parse_arguments
from app.runtime.child_kinds import Child, Delegation, Parent, Prepared
from app.runtime.hooks import fire
from app.runtime.outcome import Outcome, Stop, stopped_outcome
from app.runtime.steps import ended_ref
from app.runtime.subtree import close_subtree
from app.store import RefUpsert, WriteBatch

if TYPE_CHECKING:
    from app.runtime.emitter import StreamWriter


class Children:
    """The children of one session (see the module docstring)."""

    def __init__(self, parent: Parent) -> None:
        self.parent = parent
        self._running: dict[str, Child] = {}
        self._tasks: set[asyncio.Task[Outcome]] = set()
        self._prepared: dict[str, Prepared] = {}
        self._pause_watchers: list[asyncio.Future[None]] = []
        self.stopped: Stop | None = None
        """The stop every child gets, one still being opened included: set when the session
        stops, or suspends for the client while children run."""
        self._opening: asyncio.Lock | None = None
        self.named: dict[str, SubSessionRef] | None = None
        """The session's persistent children by name as its companion calls know them: read
        once, then added to by the children they create (see `companions.Companion`)."""

    @property
    def opening(self) -> asyncio.Lock:
        """Held while a call picks a persistent child and opens it, so the calls of a step
        do so one at a time, in call order: each sees the names the earlier ones took."""
        if self._opening is None:
            self._opening = asyncio.Lock()
        return self._opening

    # -- running ------------------------------------------------------------------------------

    async def call(
        self, delegation: Delegation, call: ToolCall, new: bool
    ) -> CallResult | Unanswered:
        """Run the child a call asks for (see `run_child`); its outcome as the call's result
        (`answer`). Arguments that do not fit are the call's error, and start no child."""
        assert call.id is not None
        call_id = call.id
        parsed = parse_arguments(call.name, delegation.input_schema, call.arguments)
        if isinstance(parsed, CallResult):
            return parsed
        child_id = delegation.child_id(self.parent.session_id, call_id)
        child_input = parsed.model_dump(mode="json")
        life = delegation.live(self, call_id, child_id, child_input, new)
        agent_type = delegation.agent_type_of(child_input)
        outcome = await self.run_child(agent_type, call_id, child_id, child_input, life)
        return self.answer(outcome)

    async def run_child(
        self,
        agent_type: str,
        call_id: str,
        child_id: str,
        child_input: dict[str, JsonValue],
        life: Coroutine[Any, Any, Outcome],
    ) -> Outcome:
        """Run a child's `life` for the call `call_id`, framed in the stream (`subagent_start`,
        the child's own chunks, `subagent_end`) and seen by the parent's hooks."""
        parent = self.parent
        try:
            parent.tree.check_lease()
            hooks = parent.agent.hooks
            await fire(
                hooks.before_sub_agent, parent.hook_context(), agent_type, child_id, child_input
            )
        except BaseException:
            life.close()
            raise
        parent.emit(
            SubagentStartChunk, sub_agent_type=agent_type, sub_session_id=child_id, call_id=call_id
        )
        # The child's whole life runs in a task of its own, shielded from this call's
        # cancellation: when the parent stops, the child still records its own stop.
        task = asyncio.get_running_loop().create_task(
            observability.delegation(agent_type, child_id, life)
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        outcome = await asyncio.shield(task)
        result = call_result(outcome).result
        parent.emit(
            SubagentEndChunk,
            sub_agent_type=agent_type,
            sub_session_id=child_id,
            call_id=call_id,
            result=result,
        )
        await fire(hooks.after_sub_agent, parent.hook_context(), agent_type, child_id, result)
        return outcome

    def answer(self, outcome: Outcome) -> CallResult | Unanswered:
        """A child's outcome as its call's result. The call stays `Unanswered` when the child
        pauses for the client (the parent pauses with it) or was dropped because the parent
        suspends (it runs again on resume)."""
        if outcome.status == "paused_awaiting_client":
            self._paused()
            return Unanswered()
        if outcome.failure_reason == "parent_suspended":
            return Unanswered(DROPPED)
        return call_result(outcome)

    def on_pause(self) -> asyncio.Future[None]:
        """A future done once a child pauses for the client (the session then suspends)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pause_watchers.append(future)
        return future

    def _paused(self) -> None:
        watchers, self._pause_watchers = self._pause_watchers, []
        for future in watchers:
            if not future.done():
                future.set_result(None)

    def running(self, child_id: str, child: Child) -> None:
        """A child runs now: the session's stops reach it (one already given, at once)."""
        self._running[child_id] = child
        if self.stopped is not None:
            child.stop(self.stopped)

    def ended(self, child_id: str) -> None:
        """The child has stopped running."""
        self._running.pop(child_id, None)

    def stop(self, stop: Stop) -> None:
        """Stop every running child, and every child still to start (the first stop wins)."""
        self.stopped = self.stopped or stop
        for child in list(self._running.values()):
            child.stop(stop)

    async def settled(self) -> None:
        """Wait until every child's life has ended (each has recorded its own end)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- children stored with the response that starts them -----------------------------------

    def prepare(self, calls: Sequence[ToolCall], delegations: dict[str, Delegation]) -> WriteBatch:
        """The children a model response starts, made ready to be stored with the response in
        one write (returned); their runs start when their calls are made."""
        batch = WriteBatch()
        for call in calls:
            delegation = delegations.get(call.name)
            if delegation is None or call.id is None:
                continue
            parsed = parse_arguments(call.name, delegation.input_schema, call.arguments)
            if isinstance(parsed, CallResult):
                continue
            child_id = delegation.child_id(self.parent.session_id, call.id)
            child_input = parsed.model_dump(mode="json")
            prepared = delegation.prepare(self.parent, call.id, child_id, child_input)
            if prepared is not None:
                prepared.add_to(batch)
                self._prepared[child_id] = prepared
        return batch

    def take_prepared(self, child_id: str) -> Prepared | None:
        """The prepared child of this id, now that its call runs."""
        return self._prepared.pop(child_id, None)

    async def close(self, batch: WriteBatch, now: int, *, from_store: bool = False) -> None:
        """Record in `batch` (the session's end) the end of the children that will not record
        their own: those prepared whose calls never ran; with `from_store`, every descendant
        the store still has running (a stop reaches those this run never reopened)."""
        if not (from_store or self._prepared):
            return
        outcome = stopped_outcome(self.stopped or Stop("interrupted"))
        if from_store:
            # Once the tree's earlier writes have landed, the store shows what is still open.
            parent = self.parent
            await parent.tree.writer.settled()
            tree = parent.tree
            await close_subtree(tree.store, tree.registry, parent.record, outcome, batch, now)
            self._prepared = {}
            return
        for prepared in self._prepared.values():
            batch.updated_sessions.append(
                prepared.record.evolve(
                    status=outcome.status,
                    error=outcome.error,
                    failure_reason=outcome.failure_reason,
                    updated_at=now,
                )
            )
            ref = ended_ref(prepared.ref, outcome.status, now)
            batch.refs.append(RefUpsert(self.parent.session_id, ref))
        self._prepared = {}


@dataclass(frozen=True, slots=True)
class Frame:
    """The stream's frame of a child that runs on its own, not inside its parent's call (a
    persistent child in the background): opened when it starts, closed by its end. Its
    chunks are the parent's, as for any child."""

    parent_id: str
    parent_type: str
    step: int
    call_id: str
    agent_type: str
    child_id: str

    def _fields(self) -> dict[str, Any]:
        return {
            "sub_agent_type": self.agent_type,
            "sub_session_id": self.child_id,
            "call_id": self.call_id,
        }

    def open(self, writer: StreamWriter) -> None:
        """Emit its `subagent_start`."""
        writer.emit(SubagentStartChunk, self.parent_id, self.parent_type, self.step, self._fields())

    def close(self, writer: StreamWriter, outcome: Outcome) -> None:
        """Emit its `subagent_end`, with the child's result."""
        fields = {**self._fields(), "result": call_result(outcome).result}
        writer.emit(SubagentEndChunk, self.parent_id, self.parent_type, self.step, fields)


@dataclass(frozen=True, slots=True)
class Unanswered:
    """A call left unanswered by a suspension: its child waits for the client, or was
    dropped (what the call's `tool_end` then says)."""

    dropped: str | None = None


DROPPED = "The session suspended before the sub-agent finished: it runs again on resume"
"""What the `tool_end` of a call to a child dropped by a suspension says."""

WAITS_FOR_CLIENT = "The sub-agent waits for the client"
"""What the `subagent_end` of a child that paused for the client says (the call stays open)."""


def failure_result(error: str) -> dict[str, JsonValue]:
    """The tool result a parent gets for a child that did not complete."""
    return {"success": False, "error": error}


def call_result(outcome: Outcome) -> CallResult:
    """A child's outcome as its parent's tool result."""
    if outcome.status == "completed":
        return CallResult(result=outcome.output)
    if outcome.status == "terminated":
        error = "The sub-agent was terminated"
    elif outcome.status == "paused_awaiting_client":
        error = WAITS_FOR_CLIENT
    else:
        error = outcome.error or f"The sub-agent ended {outcome.status}"
    return CallResult(result=failure_result(error), error=error)
