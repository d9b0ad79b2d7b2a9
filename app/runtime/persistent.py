"""Persistent children's sessions: found by name, started, continued or reopened.

A persistent child of session P named N is the session `P-agent-N`, with a ref in P whose
`mode` is `persistent` and `name` is N. Its ref's `parentToolCallId` is the companion call
that last started it (a spawn, or a message that continued it): a call made again after a
crash finds the child it already started by it. See docs/architecture.md, "Persistent
children".
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from app.agents import PersistentAgent
from app.agents.companion import CHILD_NAME
from app.ids import persistent_session_id
from app.protocol import SubSessionRef, UserMessage
from app.runtime.child_kinds import Parent, Run, TreeServices
from app.runtime.children import Children, Frame
from app.runtime.local import NewChild
from app.runtime.outcome import Outcome, Stop
from app.runtime.steps import dump_state, new_record
from app.store import MessageAppend, RefUpsert, SessionRecord, WriteBatch, now_ms

if TYPE_CHECKING:
    from app.agents import AgentConfig
    from app.protocol import Message
    from app.runtime.child_kinds import Child


class ChildTree(TreeServices, Protocol):
    """What persistent children need of their tree: to find their runs, wait for their ends,
    and start one on its own."""

    def find(self, session_id: str) -> Any:
        """The run of the session in the tree here, if any."""

    def finished(self, session_id: str) -> asyncio.Future[None]:
        """Done once the session's run here has stopped (at once if none runs)."""

    def start(self, run: Any) -> asyncio.Task[Outcome]:
        """Run `run` on its own, in a task of its own."""

    def new_run(
        self,
        agent: AgentConfig,
        record: SessionRecord,
        messages: list[Message],
        *,
        ref: SubSessionRef | None = None,
    ) -> Any:
        """A run of a session of the tree, registered with it."""


class Owner(Parent, Protocol):
    """A session with persistent children."""

    @property
    def tree(self) -> ChildTree: ...

    @property
    def children(self) -> Children: ...

    @property
    def step(self) -> int: ...


def persistent_refs(refs: Iterable[SubSessionRef]) -> dict[str, SubSessionRef]:
    """A session's persistent children's refs, by name."""
    return {ref.name: ref for ref in refs if ref.mode == "persistent" and ref.name is not None}


def auto_name(named: dict[str, SubSessionRef], agent_type: str) -> str:
    """`<agent type>-<n>`: one past the highest such name so far (stored names, so a call made
    again after a crash finds the same one)."""
    pattern = re.compile(re.escape(agent_type) + r"-(\d+)")
    taken = [int(m.group(1)) for name in named if (m := pattern.fullmatch(name))]
    return f"{agent_type}-{max(taken, default=0) + 1}"


def bad_name(name: str) -> str | None:
    """Why `name` cannot name a child, if it cannot."""
    if CHILD_NAME.fullmatch(name):
        return None
    return (
        f"The name {name!r} cannot name a child: use 1 to 64 letters, digits, '-' or '_', "
        "starting with a letter or digit"
    )


def child_id(owner: Owner, name: str) -> str:
    """The child's session id, `{parent}-agent-{name}`."""
    return persistent_session_id(owner.session_id, name)


def new_ref(child: str, entry: PersistentAgent, name: str, call_id: str) -> SubSessionRef:
    """The ref of a child (re)started by the call `call_id`: a blocking child's end is its
    caller's result, so no notice is due for it."""
    return SubSessionRef.trusted(
        {
            "sub_session_id": child,
            "agent_type": entry.agent.name,
            "parent_tool_call_id": call_id,
            "status": "running",
            "started_at": now_ms(),
            "mode": "persistent",
            "name": name,
            "completion_delivered": entry.mode == "blocking",
        }
    )


async def open_fresh(
    owner: Owner,
    entry: PersistentAgent,
    name: str,
    call_id: str,
    message: str,
    *,
    superseded: list[str] | None = None,
) -> Run:
    """Create the child (over an earlier failed or terminated one of its name, whose subtree
    `superseded` lists) with `message` as its first message, stored before it runs."""
    fresh = fresh_child(owner, entry, name, call_id, message, superseded=superseded)
    batch = WriteBatch()
    fresh.add_to(batch)
    await owner.tree.writer.commit(batch)
    return fresh.start(owner)


def fresh_child(
    owner: Owner,
    entry: PersistentAgent,
    name: str,
    call_id: str,
    message: str,
    *,
    superseded: list[str] | None = None,
) -> NewChild:
    """A new session for the child named `name`, ready to be stored."""
    agent = entry.agent
    child = child_id(owner, name)
    record = new_record(
        agent.name,
        child,
        stream_id=owner.record.stream_id,
        state=dump_state(agent.initial_state(None)),
        input=None,
        now=now_ms(),
        parent_session_id=owner.session_id,
    )
    return NewChild(
        record,
        UserMessage(content=message),
        new_ref(child, entry, name, call_id),
        agent,
        superseded,
    )


async def open_continued(
    owner: Owner,
    entry: PersistentAgent,
    record: SessionRecord,
    ref: SubSessionRef,
    call_id: str,
    message: str,
) -> Run:
    """Continue a completed child with `message`: its conversation and state are kept, its
    step count starts again from 0, and its next output is a fresh one."""
    store = owner.tree.store
    messages = await store.load_messages(record.session_id)
    turn = record.evolve(
        status="running",
        step_count=0,
        output=None,
        error=None,
        failure_reason=None,
        updated_at=now_ms(),
    )
    first = UserMessage(content=message)
    continued = new_ref(record.session_id, entry, ref.name or "", call_id)
    batch = WriteBatch(
        updated_sessions=[turn],
        messages=[MessageAppend(record.session_id, len(messages), first)],
        refs=[RefUpsert(owner.session_id, continued)],
    )
    await owner.tree.writer.commit(batch)
    return owner.child_run(entry.agent, turn, [*messages, first], continued)


async def open_again(
    tree: ChildTree,
    parent_id: str,
    agent: AgentConfig,
    record: SessionRecord,
    ref: SubSessionRef,
) -> Run:
    """Reopen a child from its checkpoint: one that was running when its server died, was
    interrupted, paused for the client, or dropped when its parent suspended (a persistent
    child keeps its memory: it is not started afresh)."""
    store = tree.store
    messages = await store.load_messages(record.session_id)
    reopened = record.evolve(status="running", error=None, failure_reason=None, updated_at=now_ms())
    running = ref.replaced({"status": "running", "completed_at": None})
    batch = WriteBatch(updated_sessions=[reopened], refs=[RefUpsert(parent_id, running)])
    await tree.writer.commit(batch)
    run: Run = tree.new_run(agent, reopened, messages, ref=running)
    run.inbox_due = True  # messages may have been queued for it while it was stopped
    flag = await store.check_interrupt_flag(record.session_id)
    if flag is not None:
        run.stop(Stop("interrupted", flag.reason))
    return run


def detach(tree: ChildTree, run: Run, frame: Frame) -> asyncio.Task[Outcome]:
    """Run a child on its own in the tree, framed in the stream from now to its end."""
    frame.open(tree.writer)
    run.frame = frame
    return tree.start(run)


async def live(children: Children, child: str, run: Run) -> Outcome:
    """The life of a child run inside its parent's call: stopped with the parent."""
    keeper: Child = run
    children.running(child, keeper)
    try:
        return await run.run()
    finally:
        children.ended(child)
