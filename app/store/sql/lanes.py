"""Write lanes: several group committers at once, each stream's batches in one of them.

One writer applies one transaction at a time: while the database executes a group, the next
waits, and a burst of commits (a hundred runs ending a step together) queues behind it. With
lanes, groups of unrelated streams are in flight together on their own connections, so the
database executes one while the process plans the next.

Order is kept where it matters. A batch joins the lane that holds a pending batch of one of its
streams, so a stream's batches are applied in the order they were committed. A batch that
cannot be placed that way (it names no stream, or streams pending in different lanes) waits
until nothing it could overtake is pending, and every batch committed after it waits behind it.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import itertools
from dataclasses import dataclass

from app.store.records import WriteBatch
from app.store.sql.group_commit import Apply, GroupCommitter


@dataclass(slots=True)
class _Entry:
    batch: WriteBatch
    streams: frozenset[str]
    outcome: asyncio.Future[None]
    """The caller's future, which the lane settles: one future per batch."""
    hold: bool


class WriteLanes:
    """`count` group committers (one behaves exactly as a single `GroupCommitter`), each
    holding batches as `GroupCommitter` does for `hold` seconds."""

    def __init__(self, apply: Apply, *, count: int, hold: float = 0.0) -> None:
        self._lanes = [GroupCommitter(apply, hold=hold) for _ in range(max(count, 1))]
        self._only = self._lanes[0] if len(self._lanes) == 1 else None
        """The lane, when there is one: every batch goes straight to it."""
        self._held: dict[str, list[int]] = {}
        """For each stream with pending batches: the lane holding them, and how many."""
        self._in_lanes = 0
        """Batches queued in a lane and not yet settled."""
        self._blocked: collections.deque[_Entry] = collections.deque()
        """Batches waiting for a lane, in commit order."""
        self._unplaced = 0
        """Batches naming no stream queued and not yet settled: all others follow them."""
        self._rotation = itertools.cycle(range(len(self._lanes)))

    @property
    def groups(self) -> int:
        """Transactions committed so far, every lane together."""
        return sum(lane.groups for lane in self._lanes)

    def busy_for(self) -> float:
        """Seconds the longest-busy lane has been applying its current group."""
        return max(lane.busy_for() for lane in self._lanes)

    def start(self) -> None:
        """Start every lane's writer task."""
        for lane in self._lanes:
            lane.start()

    async def close(self) -> None:
        """Commit what is queued, then stop every lane."""
        for entry in self._blocked:
            entry.outcome.cancel()
        self._blocked.clear()
        for lane in self._lanes:
            await lane.close()

    def submit(self, batch: WriteBatch, *, hold: bool = False) -> asyncio.Future[None]:
        """Take `batch` now; the future resolves once it is committed, or fails with what its
        own transaction raised. Cancelling the future withdraws the batch unless a lane's
        writer has already taken it. `hold`: see `GroupCommitter.enqueue`."""
        if self._only is not None:
            return self._only.enqueue(batch, hold=hold)
        entry = _Entry(batch, batch.stream_ids(), asyncio.get_running_loop().create_future(), hold)
        if self._blocked or not self._place(entry):
            self._blocked.append(entry)
        return entry.outcome

    def _dispatch(self) -> None:
        """Queue blocked batches in lanes, oldest first, as long as the oldest can go. One
        withdrawn (its future cancelled) is dropped here, or by its lane's writer once queued."""
        blocked = self._blocked
        while blocked:
            entry = blocked[0]
            if not (entry.outcome.done() or self._place(entry)):
                return
            blocked.popleft()

    def _place(self, entry: _Entry) -> bool:
        """Queue the batch in the lane it may go to; False when it must wait."""
        lane = self._lane_for(entry.streams)
        if lane is None:
            return False
        try:
            self._lanes[lane].enqueue(
                entry.batch,
                hold=entry.hold,
                outcome=entry.outcome,
                settled=functools.partial(self._settle, entry),
            )
        except Exception as exc:
            entry.outcome.set_exception(exc)
            return True
        held = self._held
        for stream_id in entry.streams:
            place = held.get(stream_id)
            if place is None:
                held[stream_id] = [lane, 1]
            else:
                place[1] += 1
        self._in_lanes += 1
        self._unplaced += not entry.streams
        return True

    def _lane_for(self, streams: frozenset[str]) -> int | None:
        if not streams:
            return None if self._in_lanes else 0
        if self._unplaced:
            return 0
        held = self._held
        lane = None
        for stream_id in streams:
            place = held.get(stream_id)
            if place is not None:
                if lane is None:
                    lane = place[0]
                elif place[0] != lane:
                    return None
        return next(self._rotation) if lane is None else lane

    def _settle(self, entry: _Entry) -> None:
        """Its lane is done with the batch: what it held back may go."""
        self._in_lanes -= 1
        self._unplaced -= not entry.streams
        held = self._held
        for stream_id in entry.streams:
            place = held[stream_id]
            place[1] -= 1
            if not place[1]:
                del held[stream_id]
        if self._blocked:
            self._dispatch()
