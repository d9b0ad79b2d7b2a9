"""What the companion calls that look after a child already spawned do: look at it
(`getChildStatus`), wait for its result (`waitForResult`), terminate it (`terminateChild`).
Apart from spawning and messaging, which open children (app/runtime/companions.py). See
docs/architecture.md, "Persistent children".
"""

from __future__ import annotations

import asyncio

from pydantic import JsonValue

from app.protocol import SubSessionRef
from app.runtime.calls import CallResult
from app.runtime.child_kinds import Run
from app.runtime.children import Unanswered, call_result
from app.runtime.local import stored
from app.runtime.outcome import Outcome, Stop
from app.runtime.persistent import Owner, persistent_refs
from app.runtime.subtree import close_subtree, descendants
from app.store import RefUpsert, SessionRecord, WriteBatch, now_ms

TERMINATED = "Terminated by its parent"
"""The error of a child `terminateChild` ended, and of its subtree."""

WAIT_DROPPED = "The session suspended while waiting: the wait runs again on resume"
"""What a `waitForResult` cut short by its session's suspension says."""


async def status_of(owner: Owner, ref: SubSessionRef) -> CallResult:
    """What `getChildStatus` answers: the child as listed, its status and step count, and its
    output or error."""
    record = await stored(owner.tree.store, ref.sub_session_id)
    if record is None:
        return CallResult(error=f"Child {ref.name!r} is lost")
    result: dict[str, JsonValue] = {**listed(ref), "status": record.status}
    result["stepCount"] = record.step_count
    if record.status == "completed":
        result["output"] = record.output
    elif record.error is not None:
        result["error"] = record.error
    return CallResult(result=result)


async def wait_for(owner: Owner, call_id: str, ref: SubSessionRef) -> CallResult | Unanswered:
    """What `waitForResult` (the call `call_id`) answers once the child has ended: its result,
    marked delivered. `Unanswered` when the session suspends meanwhile."""
    tree = owner.tree
    child = ref.sub_session_id
    ended = tree.finished(child)
    waiter = _Waiter(ended)
    key = f"{child}#wait:{call_id}"
    owner.children.running(key, waiter)
    try:
        await ended
    except asyncio.CancelledError:
        if waiter.stopped is None:
            raise
        return Unanswered(WAIT_DROPPED)
    finally:
        owner.children.ended(key)
    await tree.writer.settled()
    record = await stored(tree.store, child)
    if record is None:
        return CallResult(error=f"Child {ref.name!r} is lost")
    if record.status not in ("completed", "failed", "terminated"):
        return CallResult(error=f"Child {ref.name!r} is {record.status}: it has no result")
    latest = persistent_refs(await tree.store.get_sub_session_refs(owner.session_id))
    taken = latest.get(ref.name or "", ref).replaced({"completion_delivered": True})
    await tree.writer.commit(WriteBatch(refs=[RefUpsert(owner.session_id, taken)]))
    return call_result(settled(record))


async def terminate(owner: Owner, ref: SubSessionRef) -> CallResult:
    """What `terminateChild` does: stop the child and whatever of its subtree runs here, end
    the rest in the store, and mark its ref terminated."""
    tree = owner.tree
    child = ref.sub_session_id
    # The child and whatever of its subtree runs here (its own children running on their
    # own outlive its turn) stop and record their ends; the store ends the rest.
    subtree = [child, *await descendants(tree.store, child)]
    running: list[str] = []
    for session_id in subtree:
        run: Run | None = tree.find(session_id)
        if run is not None:
            run.stop(Stop("terminated", TERMINATED))
            running.append(session_id)
    for session_id in running:
        await tree.finished(session_id)
    await tree.writer.settled()
    record = await stored(tree.store, child)
    now = now_ms()
    latest = persistent_refs(await tree.store.get_sub_session_refs(owner.session_id))
    ended = latest.get(ref.name or "", ref).replaced(
        {"status": "terminated", "completed_at": now, "completion_delivered": True}
    )
    batch = WriteBatch(refs=[RefUpsert(owner.session_id, ended)])
    if record is not None and record.status != "terminated":
        batch.updated_sessions.append(
            record.evolve(status="terminated", output=None, updated_at=now)
        )
        gone = Outcome("terminated", error=TERMINATED)
        await close_subtree(tree.store, tree.registry, record, gone, batch, now)
    await tree.writer.commit(batch)
    return CallResult(result={**listed(ref), "status": "terminated"})


class _Waiter:
    """A `waitForResult` in progress, as its session's children see it: a suspension stops
    it (the wait is made again on resume)."""

    def __init__(self, ended: asyncio.Future[None]) -> None:
        self.ended = ended
        self.stopped: Stop | None = None

    def stop(self, stop: Stop) -> None:
        if self.stopped is None and not self.ended.done():
            self.stopped = stop
            self.ended.cancel()


def settled(record: SessionRecord) -> Outcome:
    """A stopped child's outcome, as stored."""
    if record.status == "completed":
        return Outcome("completed", output=record.output)
    if record.status == "terminated":
        return Outcome("terminated")
    return Outcome(record.status, error=record.error or f"The child ended {record.status}")


def listed(ref: SubSessionRef) -> dict[str, JsonValue]:
    """A child as the companion calls show it (`listChildren`, and the others' answers)."""
    return {
        "name": ref.name,
        "agentType": ref.agent_type,
        "sessionId": ref.sub_session_id,
        "status": ref.status,
    }
