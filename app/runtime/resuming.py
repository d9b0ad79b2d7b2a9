"""What a resume of a root session means (`resume_root`): it restarts the children running on
their own that an interrupt stopped, answers a paused tree wherever its calls wait, continues
a finished root with a new message (in the tree still running here, if its children run), and
asks the host to run it. `AgentRuntime.resume` is its public face. See docs/architecture.md,
"Suspension" and "Persistent children".
"""

from __future__ import annotations

from time import monotonic
from typing import TYPE_CHECKING

from app.errors import SessionNotResumableError, SessionRunningError
from app.protocol import Message, SessionStatus
from app.runtime.background import Background, background_children
from app.runtime.handle import RunHandle
from app.runtime.inputs import Answers
from app.runtime.pending import PAUSED, AnswerPlan, paused_tree, plan_answers
from app.runtime.starting import resumption
from app.runtime.steps import appended
from app.store import SessionRecord, StateStore, WriteBatch, now_ms

if TYPE_CHECKING:
    from app.runtime.host import Host
    from app.runtime.tree import Tree

RESTARTED: frozenset[SessionStatus] = frozenset({"interrupted"})
"""The ends of children running on their own that a resume without answers restarts."""


async def resume_root(
    host: Host, session_id: str, message: str | None, answers: Answers
) -> RunHandle:
    """Resume the root session `session_id` with `message` and `answers` (parsed): see
    `AgentRuntime.resume`."""
    if not await host.settled(session_id):
        raise SessionRunningError(f"Session {session_id!r} is still saving its last run")
    record = await host.store.get_session(session_id)
    if not record.is_root:
        raise SessionNotResumableError(
            f"Session {session_id!r} is a sub-agent: resume its root session {record.stream_id!r}"
        )
    here = host.trees.get(session_id)
    if here is not None:
        return await _new_turn(host, here, record, message, answers)
    messages = await host.store.load_messages(session_id)
    # Without a message, a resume also restarts the children running on their own that an
    # interrupt stopped, or that paused and are answered now (all there is to resume, when
    # the root's turn is over).
    stopped: list[Background] = []
    if message is None:
        ends = RESTARTED if answers.empty else RESTARTED | PAUSED
        stopped = await background_children(host.store, host.registry, session_id, ends)
    root = not (stopped and record.status in ("completed", "failed", "terminated"))
    new_messages: list[Message] = []
    plan = AnswerPlan()
    if root:
        record, new_messages = resumption(record, message, answers)
    if record.status == "paused_awaiting_client" or not answers.empty:
        paused = await paused_tree(host.store, host.registry, record, strict=True)
        plan = plan_answers(paused, answers, session_id)
    claimed_at = monotonic()
    if session_id in host.trees:
        raise SessionRunningError(f"Session {session_id!r} is running")
    tree = host.open_tree(session_id, 0, leased_at=claimed_at)
    try:
        if not await host.store.claim_session(session_id, host.owner_id, host.lease_ms):
            raise SessionRunningError(f"Session {session_id!r} is running in another process")
        await host.store.check_interrupt_flag(session_id)
        for child_id, (transport, results, decisions) in plan.remote.items():
            await transport.resume(child_id, tool_results=results, approvals=decisions)
        tree.resume(plan.resumed)
        new_messages += plan.messages.pop(session_id, [])
        extra = await _answers_below(host.store, plan)
        return await host.reopen(
            tree, record, messages, new_messages, extra=extra, background=stopped, root=root
        )
    except BaseException:
        host.trees.forget(tree)
        raise


async def _new_turn(
    host: Host, tree: Tree, record: SessionRecord, message: str | None, answers: Answers
) -> RunHandle:
    """A new turn of a root whose own run has ended while its tree still runs here (its
    background children): the root runs again in that tree."""
    session_id = record.session_id
    if tree.find(session_id) is not None or message is None:
        raise SessionRunningError(f"Session {session_id!r} is running")
    record, new_messages = resumption(record, message, answers)
    messages = await host.store.load_messages(session_id)
    record = record.evolve(status="running", failure_reason=None, updated_at=now_ms())
    batch = WriteBatch(
        updated_sessions=[record],
        messages=appended(session_id, len(messages), new_messages),
    )
    await tree.writer.commit(batch)
    tree.root_status = "running"
    config = host.registry.get(record.agent_type)
    return host.launch(tree, config, record, messages + new_messages)


async def _answers_below(store: StateStore, plan: AnswerPlan) -> WriteBatch:
    """The answers to calls of the tree's other paused sessions: appended to their
    conversations in the write that resumes the root."""
    batch = WriteBatch()
    for session_id, answers in plan.messages.items():
        held = await store.load_messages(session_id)
        batch.messages.extend(appended(session_id, len(held), answers))
    return batch
