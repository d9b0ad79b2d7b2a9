"""The `subagent` tool: a call delegates a task to a child built for it from the parent's agent
(`build_child`: its category, skills and what it inherits), whose session is
`{parent}-task-{toolCallId}`.

Without `background` the child runs inside the call, like a sub-agent tool's (`TaskDelegation`,
a kind of child of `Children`). With `background` the call answers at once: the child is stored
`queued` with its place in the durable queue, runs on its own in the tree once the scheduler
grants it a slot (`Lane`), and its parent hears of its end in a notice. See
docs/architecture.md, "Background delegation".
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, JsonValue

from app.agents import AgentConfig, depth_refusal, resolve_timeout
from app.agents.delegation_tools import DelegationTool, SubagentInput
from app.agents.results import Lifecycle, status_payload
from app.errors import DelegationError
from app.ids import task_session_id
from app.protocol import SessionStatus, SubSessionRef
from app.runtime.calls import CallResult, parse_arguments
from app.runtime.child_kinds import Parent
from app.runtime.children import Children, Frame
from app.runtime.hooks import fire
from app.runtime.local import LocalChild, NewChild, new_child, stored
from app.runtime.outcome import Outcome, Stop
from app.runtime.persistent import Owner, detach
from app.runtime.resolve import task_agent
from app.store import (
    QueueEntry,
    QueueMove,
    RefUpsert,
    SessionRecord,
    StateStore,
    WriteBatch,
    now_ms,
)

if TYPE_CHECKING:
    from app.runtime.scheduler import Scheduler

HELD = frozenset({"interrupted", "paused_awaiting_client"})
"""The ends after which a background session keeps its place in the queue: its tree stopped,
and resuming it queues the session again (before any queued later)."""


def lifecycle(record: SessionRecord) -> Lifecycle:
    """A background session's lifecycle state, from its session's status."""
    status = record.status
    if status == "queued":
        return "queued"
    if status == "completed":
        return "succeeded"
    if status == "terminated":
        return "cancelled"
    if status == "failed":
        return "timed_out" if record.failure_reason == "timeout" else "failed"
    return "running"


async def where(store: StateStore, record: SessionRecord) -> tuple[Lifecycle, int | None]:
    """A background session's lifecycle state, with its place in the queue while queued (one
    that holds a slot but is not stored `running` yet is running)."""
    state = lifecycle(record)
    if state != "queued":
        return state, None
    position = await store.queue_position(record.session_id)
    return ("queued", position) if position is not None else ("running", None)


@dataclass(frozen=True, slots=True)
class TaskDelegation:
    """The `subagent` calls that wait for their child: a local child, run inside the call."""

    tool: DelegationTool

    @property
    def input_schema(self) -> type[BaseModel]:
        """What the call's arguments must be."""
        return SubagentInput

    @property
    def outside(self) -> bool:
        """The child is in this process's store."""
        return False

    def agent_type_of(self, child_input: dict[str, JsonValue]) -> str:
        """The child's category."""
        return str(child_input["category"])

    def child_id(self, parent_id: str, call_id: str) -> str:
        """`{parent}-task-{toolCallId}`."""
        return task_session_id(parent_id, call_id)

    def prepare(
        self, parent: Parent, call_id: str, child_id: str, child_input: dict[str, JsonValue]
    ) -> NewChild | None:
        """Nothing is stored with the response: the call is checked first (its category,
        skills and depth), and a refused one must leave no child behind. The child is stored
        when its call runs, after the response."""
        return None

    async def live(
        self,
        children: Children,
        call_id: str,
        child_id: str,
        child_input: dict[str, JsonValue],
        new: bool,
    ) -> Outcome:
        """Find, create or reopen the child, then run it to an outcome."""
        parent = children.parent.agent
        arguments = SubagentInput.model_validate(child_input)
        agent = task_agent(parent, arguments)
        timeout = resolve_timeout(
            parent,
            arguments.category,
            arguments.timeout,
            runtime_default=children.parent.tree.task_timeout,
        )
        child = LocalChild(agent, call_id, child_id, child_input, message=arguments.prompt)
        return await child.live(children, new, timeout)


async def delegate(owner: Owner, call_id: str, arguments: Any, new: bool) -> CallResult | None:
    """Make a `subagent` call that is refused (a tool error) or runs in the background (its
    answer); None for one that waits for its child (`Children.call` runs it)."""
    parsed = parse_arguments("subagent", SubagentInput, arguments)
    if isinstance(parsed, CallResult):
        return parsed
    assert isinstance(parsed, SubagentInput)
    parent = owner.agent
    try:
        agent = task_agent(parent, parsed)
    except DelegationError as exc:
        return CallResult(error=exc.message)
    refusal = depth_refusal(parent, await depth(owner) + 1)
    if refusal is not None:
        return CallResult(error=refusal)
    if not parsed.background:
        return None
    timeout = resolve_timeout(
        parent, parsed.category, parsed.timeout, runtime_default=owner.tree.task_timeout
    )
    return await launch(owner, agent, parsed, call_id, timeout, new)


async def depth(owner: Owner) -> int:
    """How many `subagent` delegations lead to the session (0 for one no such call started)."""
    store = owner.tree.store
    found, record = 0, owner.record
    while record.parent_session_id is not None:
        if not record.session_id.startswith(f"{record.parent_session_id}-task-"):
            break
        found += 1
        record = await store.get_session(record.parent_session_id)
    return found


async def launch(
    owner: Owner,
    agent: AgentConfig,
    arguments: SubagentInput,
    call_id: str,
    timeout: float | None,
    new: bool,
) -> CallResult:
    """Queue the background child (a call made again finds the one it queued) and answer
    with its session id and where it is."""
    tree = owner.tree
    child_id = task_session_id(owner.session_id, call_id)
    existing = None if new else await stored(tree.store, child_id)
    if existing is None:
        child_input = arguments.model_dump(mode="json")
        fresh = new_child(
            owner, agent, call_id, child_id, child_input, message=arguments.prompt, background=True
        )
        batch = WriteBatch()
        fresh.add_to(batch)
        timeout_ms = None if timeout is None else round(timeout * 1000)
        entry = QueueEntry(
            child_id, owner.record.stream_id, owner.session_id, "queued", 0, timeout_ms, now_ms()
        )
        batch.enqueued.append(entry)
        await tree.writer.commit(batch)
        hooks = owner.agent.hooks
        await fire(hooks.before_sub_agent, owner.hook_context(), agent.name, child_id, child_input)
        run = fresh.start(owner)
        existing = fresh.record
    elif existing.status == "queued" and tree.find(child_id) is None:
        # Queued by this call before a stop cut it: nothing runs it yet.
        refs = await tree.store.get_sub_session_refs(owner.session_id)
        ref = next(ref for ref in refs if ref.sub_session_id == child_id)
        messages = await tree.store.load_messages(child_id)
        run = owner.child_run(agent, existing, messages, ref)
    else:
        run = None
    if run is not None:
        run.lane = Lane(tree.scheduler, timeout)
        frame = Frame(owner.session_id, owner.agent.name, owner.step, call_id, agent.name, child_id)
        detach(tree, run, frame)
    state, position = await where(tree.store, existing)
    payload = status_payload(
        session_id=child_id,
        category=arguments.category,
        lifecycle=state,
        error=existing.error,
        queue_position=position,
    )
    return CallResult(result=payload)


class Lane:
    """A background session's place in the queue, as its run keeps it: it waits for a slot
    before its first step, runs at most its time limit from the moment it got one, and its end
    frees the slot (or keeps its place, for a stop of its tree)."""

    def __init__(self, scheduler: Scheduler, timeout: float | None) -> None:
        self.scheduler = scheduler
        self.timeout = timeout
        self._timer: asyncio.TimerHandle | None = None

    async def begin(self, run: Any) -> None:
        """Wait for the slot (unless the session holds it: it ran when its server died), then
        store the session running and start its clock."""
        session_id = run.session_id
        entry = await run.tree.store.queue_entry(session_id)
        started = None if entry is None else entry.started_at
        if entry is not None and entry.state != "running":
            back = [QueueMove(session_id, "queued")] if entry.state == "held" else []
            await _store_status(run, "queued", back)
            await self.scheduler.slot(session_id)
            started = now_ms()
        await _store_status(run, "running", [])
        if self.timeout is not None:
            spent = 0.0 if started is None else max(0.0, (now_ms() - started) / 1000)
            message = f"The subagent timed out after {self.timeout:g}s"
            self._timer = asyncio.get_running_loop().call_later(
                max(0.0, self.timeout - spent), run.stop, Stop("timeout", message)
            )

    def end(self, batch: WriteBatch, outcome: Outcome, session_id: str) -> None:
        """Add the queue's part of the session's end to `batch`."""
        if self._timer is not None:
            self._timer.cancel()
        if outcome.status in HELD or outcome.failure_reason == "parent_suspended":
            batch.queue_moves.append(QueueMove(session_id, "held"))
        else:
            batch.dequeued.append(session_id)

    def ended(self, landed: asyncio.Future[None]) -> None:
        """Once the end has landed, its slot may be free: claim."""
        landed.add_done_callback(lambda _: self.scheduler.poke())


async def _store_status(run: Any, status: SessionStatus, moves: list[QueueMove]) -> None:
    """Store the session (and its parent's ref) in `status`, with `moves`, unless it is."""
    if run.record.status == status and not moves:
        return
    record = run.record.evolve(status=status, error=None, failure_reason=None, updated_at=now_ms())
    batch = WriteBatch(updated_sessions=[record], queue_moves=moves)
    if run.ref is not None:
        ref: SubSessionRef = run.ref.replaced({"status": status})
        batch.refs.append(RefUpsert(record.parent_session_id or "", ref))
        run.ref = ref
    await run.tree.writer.commit(batch)
    run.record = record
