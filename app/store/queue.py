"""The background queue's records, and the in-memory store's queue.

Background child sessions wait in one queue, shared by every process on the database, for a
slot of a cap on how many run at once: FIFO by `QueueEntry.seq`. A batch adds, moves and removes
rows (`WriteBatch.enqueued`, `queue_moves`, `dequeued`); `StateStore.claim_queued` hands out
free slots, atomically across processes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal

QueueState = Literal["queued", "running", "held"]
"""`queued`: waits for a slot; `running`: holds one; `held`: its tree stopped (an interrupt),
so it waits for nothing, but keeps its place for when it is moved back to `queued`."""


@dataclass(frozen=True, slots=True)
class QueueEntry:
    """A background child session's row in the queue."""

    session_id: str
    """The background child session: one row per session."""
    stream_id: str
    """Its root's stream."""
    parent_session_id: str
    state: QueueState
    seq: int
    """The global FIFO order, assigned by the store when the row is inserted (pass 0):
    increasing in insertion order, across processes."""
    timeout_ms: int | None
    """The child's timeout, counted from its start."""
    enqueued_at: int
    """Milliseconds since the epoch."""
    started_at: int | None = None
    """When it last took a slot (`StateStore.claim_queued`); kept when it is moved to `queued`
    or `held`, set again by its next claim."""


@dataclass(frozen=True, slots=True)
class QueueMove:
    """A queue row changes state (nothing else about it changes)."""

    session_id: str
    state: QueueState


class MemoryQueue:
    """The queue of `MemoryStore`: plain dictionaries; the store calls it without awaiting, so
    each call is atomic on the event loop."""

    def __init__(self) -> None:
        self._rows: dict[str, QueueEntry] = {}
        self._seq = 0

    def apply(
        self, enqueued: Sequence[QueueEntry], moves: Sequence[QueueMove], dequeued: Sequence[str]
    ) -> None:
        """A batch's changes, in the order `WriteBatch` documents: removals, inserts, moves."""
        for session_id in dequeued:
            self._rows.pop(session_id, None)
        for entry in enqueued:
            if entry.session_id in self._rows:
                continue
            self._seq += 1
            self._rows[entry.session_id] = dataclasses.replace(entry, seq=self._seq)
        for move in moves:
            row = self._rows.get(move.session_id)
            if row is not None:
                self._rows[move.session_id] = dataclasses.replace(row, state=move.state)

    def remove(self, session_id: str) -> None:
        """Forget the session's row (its session was deleted)."""
        self._rows.pop(session_id, None)

    def claim(self, cap: int, candidates: Collection[str], now: int) -> list[str]:
        """See `StateStore.claim_queued`."""
        running = sum(1 for row in self._rows.values() if row.state == "running")
        free = cap - running
        if free <= 0 or not candidates:
            return []
        heads = sorted((row for row in self._rows.values() if row.state == "queued"), key=_by_seq)[
            :free
        ]
        claimed = [row.session_id for row in heads if row.session_id in candidates]
        for session_id in claimed:
            self._rows[session_id] = dataclasses.replace(
                self._rows[session_id], state="running", started_at=now
            )
        return claimed

    def entry(self, session_id: str) -> QueueEntry | None:
        """The session's row, if any."""
        return self._rows.get(session_id)

    def position(self, session_id: str) -> int | None:
        """See `StateStore.queue_position`."""
        row = self._rows.get(session_id)
        if row is None or row.state != "queued":
            return None
        return sum(1 for r in self._rows.values() if r.state == "queued" and r.seq < row.seq)

    def stream(self, stream_id: str) -> list[QueueEntry]:
        """The stream's rows, by seq."""
        return sorted((r for r in self._rows.values() if r.stream_id == stream_id), key=_by_seq)

    def counts(self) -> tuple[int, int]:
        """How many rows are queued, and how many running."""
        states = [row.state for row in self._rows.values()]
        return states.count("queued"), states.count("running")


def _by_seq(entry: QueueEntry) -> int:
    return entry.seq
