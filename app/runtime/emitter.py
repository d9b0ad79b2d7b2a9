"""Numbers a root stream's chunks 1, 2, 3, ... and commits them in order, batched (group commit).

One `StreamWriter` serves a root session and all its local sub-agents. Emitting only queues a
chunk; the queue is committed with the next step commit, or by a flush a few milliseconds later,
whichever comes first, so text deltas never cost one transaction each. Adjacent text deltas of
one agent within a flush are joined into one chunk. Sequences
are given when the queue is committed, in emission order. Readers see a chunk once it is
committed, so a reconnecting client never sees a chunk that a crash could take back.

A new root's writer may start behind the batch that creates its session (`follow`): the run
works while that lands, and its own batches reach the store only once it has.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from app.errors import StoreError
from app.protocol import BaseChunk, Chunk, TextDeltaChunk
from app.store import ChunkAppend, RefUpsert, StateStore, WriteBatch, now_ms

PRUNE_AT = 64
"""The fewest outcomes of submitted batches kept before the settled ones are pruned."""


class _Queued:
    """A chunk waiting for its sequence number."""

    __slots__ = ("agent_id", "agent_type", "chunk_type", "fields", "step", "timestamp")

    def __init__(
        self,
        chunk_type: type[BaseChunk],
        agent_id: str,
        agent_type: str,
        step: int,
        fields: dict[str, Any],
    ) -> None:
        self.chunk_type = chunk_type
        self.agent_id = agent_id
        self.agent_type = agent_type
        self.step = step
        self.fields = fields
        self.timestamp = now_ms()


class StreamWriter:
    """The single writer of one stream within this process."""

    def __init__(
        self,
        store: StateStore,
        stream_id: str,
        last_sequence: int,
        *,
        flush_delay: float,
        fence: tuple[str, str] | None = None,
    ) -> None:
        self.store = store
        self.stream_id = stream_id
        self.flush_delay = flush_delay
        self.fence = fence
        """Every batch lands only while this lease is held (`WriteBatch.fence`)."""
        self._last = last_sequence
        self._queue: list[_Queued] = []
        self._tracked: dict[tuple[str, str], RefUpsert] = {}
        """Ref updates that describe queued chunks (a remote child's last copied sequence):
        committed with them, the latest per ref."""
        self._flush_timer: asyncio.TimerHandle | None = None
        self._flushes: set[asyncio.Future[None]] = set()
        """Outcomes of the timer's flushes still in flight."""
        self._failure: BaseException | None = None
        self._outcomes: list[asyncio.Future[None]] = []
        """Outcomes of the batches submitted so far, pruned of settled ones now and then."""
        self._prune_at = PRUNE_AT
        """How many outcomes are kept before the settled ones are pruned."""
        self._leader: asyncio.Future[None] | None = None
        self._behind: list[tuple[WriteBatch, bool, asyncio.Future[None]]] = []
        """Batches submitted while the leader is landing, in order, with their outcomes."""
        self._texted: dict[str, int] = {}
        """Per agent, the last step whose text has left the queue (has a sequence)."""

    def restart(self, last_sequence: int) -> None:
        """Continue the stream after `last_sequence`: what the store holds when a stopped tree
        runs again (before this writer has written anything)."""
        assert not self._queue, "the writer has chunks queued already"
        assert not self._outcomes, "the writer has written already"
        self._last = last_sequence

    def follow(self, leader: asyncio.Future[None]) -> None:
        """Hand the store nothing until `leader` (the outcome of the batch that creates the
        stream's session) has landed: batches submitted meanwhile wait here, in order, then go
        to the store together, or fail if it fails. Without this, a batch refused for a reason
        of its own (a duplicate session id) would not stop the writes that build on it."""
        if not leader.done():
            self._leader = leader
            leader.add_done_callback(self._lead)

    def _lead(self, leader: asyncio.Future[None]) -> None:
        self._leader = None
        behind, self._behind = self._behind, []
        if leader.cancelled() or leader.exception() is not None:
            cause = "cancelled" if leader.cancelled() else repr(leader.exception())
            self._failure = StoreError(f"The session's creation did not land ({cause})")
            for _, _, outcome in behind:
                _fail(outcome, self._failure)
            return
        for batch, hold, outcome in behind:
            if self._failure is not None:
                # As `submit` refuses: a batch after a failed one would land past a gap.
                _fail(outcome, self._failure)
                continue
            if outcome.cancelled():
                continue
            try:
                landed = self._hand_over(batch, hold)
            except Exception as exc:
                _fail(outcome, exc)
                continue
            _relay(landed, outcome)

    def emit(
        self,
        chunk_type: type[BaseChunk],
        agent_id: str,
        agent_type: str,
        step: int,
        fields: dict[str, Any],
    ) -> None:
        """Queue a chunk for the next commit."""
        queue = self._queue
        if chunk_type is TextDeltaChunk and queue:
            last = queue[-1]
            if (
                last.chunk_type is TextDeltaChunk
                and last.agent_id == agent_id
                and last.step == step
            ):
                last.fields["delta"] += fields["delta"]
                return
        queue.append(_Queued(chunk_type, agent_id, agent_type, step, fields))
        if self._flush_timer is None:
            self._flush_timer = asyncio.get_running_loop().call_later(
                self.flush_delay, self._flush_soon
            )

    def track(self, upsert: RefUpsert) -> None:
        """Commit `upsert` with the chunks queued so far (replacing an earlier one for the ref)."""
        self._tracked[(upsert.parent_session_id, upsert.ref.sub_session_id)] = upsert
        if self._flush_timer is None:
            self._flush_timer = asyncio.get_running_loop().call_later(
                self.flush_delay, self._flush_soon
            )

    def retract_text(self, agent_id: str, step: int) -> bool:
        """Drop the agent's queued text deltas of `step` (a model call starting again). Queued
        chunks have no sequence yet and no reader has seen them, so nothing leaves a gap.
        Whether some of that text had left the queue already (readers may have seen it)."""
        self._queue = [
            item
            for item in self._queue
            if not (
                item.chunk_type is TextDeltaChunk
                and item.agent_id == agent_id
                and item.step == step
            )
        ]
        if self._texted.get(agent_id) != step:
            return False
        del self._texted[agent_id]
        return True

    def _take(self) -> list[Chunk]:
        sequence = self._last
        chunks = []
        for item in self._queue:
            sequence += 1
            fields = item.fields
            fields["sequence"] = sequence
            fields["agent_id"] = item.agent_id
            fields["agent_type"] = item.agent_type
            fields["step"] = item.step
            fields["timestamp"] = item.timestamp
            if item.chunk_type is TextDeltaChunk:
                self._texted[item.agent_id] = item.step
            chunks.append(item.chunk_type.trusted(fields))
        self._queue = []
        self._last = sequence
        return chunks  # type: ignore[return-value]

    async def commit(self, batch: WriteBatch) -> None:
        """Commit `batch` atomically together with every chunk queued so far."""
        await self.submit(batch)

    def submit(self, batch: WriteBatch, *, hold: bool = False) -> asyncio.Future[None]:
        """Hand `batch`, with every chunk queued so far, to the store now; the future is its
        outcome. The store applies one stream's batches in the order they were submitted, so
        chunks always land as a contiguous prefix. `hold`: see `StateStore.submit`."""
        if self._failure is not None:
            raise self._failure
        batch.fence = self.fence
        if self._queue:
            batch.chunks.append(ChunkAppend(self.stream_id, self._take()))
        if self._tracked:
            batch.refs.extend(self._tracked.values())
            self._tracked = {}
        if self._leader is not None:
            outcome: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._behind.append((batch, hold, outcome))
        else:
            outcome = self._hand_over(batch, hold)
        if not outcome.done():
            outcomes = self._outcomes
            if len(outcomes) >= self._prune_at:
                outcomes[:] = [pending for pending in outcomes if not pending.done()]
                # Twice what is still in flight: with many batches in flight at once (1,000
                # launches of one step), pruning on every submit would be quadratic.
                self._prune_at = max(PRUNE_AT, 2 * len(outcomes))
            outcomes.append(outcome)
        return outcome

    @property
    def unsettled(self) -> bool:
        """Whether a batch submitted so far has not landed or failed yet."""
        return any(not outcome.done() for outcome in self._outcomes)

    async def settled(self) -> None:
        """Wait until every batch submitted so far has landed or failed."""
        pending = [outcome for outcome in self._outcomes if not outcome.done()]
        self._outcomes = pending
        if pending:
            await asyncio.wait(pending)

    def _hand_over(self, batch: WriteBatch, hold: bool) -> asyncio.Future[None]:
        try:
            outcome = self.store.submit(batch, hold=hold)
        except Exception as exc:
            self._failure = exc
            raise
        # A store that settles the batch at once (the memory store) needs no callback: one
        # would cost a turn of the loop per commit.
        if outcome.done():
            self._note_failure(outcome)
        else:
            outcome.add_done_callback(self._note_failure)
        return outcome

    def _note_failure(self, outcome: asyncio.Future[None]) -> None:
        # A failed write may have left a gap: no later write of this stream may land.
        if self._failure is None and not outcome.cancelled():
            self._failure = outcome.exception()

    async def drain(self) -> None:
        """Commit what is queued and wait for background flushes."""
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        if self._queue or self._tracked:
            await self.commit(WriteBatch())
        if self._flushes:
            await asyncio.gather(*self._flushes, return_exceptions=True)

    def discard(self) -> None:
        """Drop what is queued, chunks and the refs that describe them alike (the process is
        stopping as if it had crashed)."""
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        self._queue = []
        self._tracked = {}

    def _flush_soon(self) -> None:
        self._flush_timer = None
        if not (self._queue or self._tracked) or self._failure is not None:
            return
        # Handed over from the timer itself, without a task to await it: a failure is kept in
        # `_failure` (the run's next commit raises it), and `drain` waits for the outcome.
        with contextlib.suppress(Exception):
            outcome = self.submit(WriteBatch())
            if not outcome.done():
                self._flushes.add(outcome)
                outcome.add_done_callback(self._flushes.discard)


def _relay(source: asyncio.Future[None], target: asyncio.Future[None]) -> None:
    """Settle `target` as `source` settles; cancelling `target` cancels `source` (as cancelling
    a store's future withdraws its batch while it is queued)."""

    def settle(done: asyncio.Future[None]) -> None:
        if target.done():
            return
        if done.cancelled():
            target.cancel()
        elif (error := done.exception()) is not None:
            _fail(target, error)
        else:
            target.set_result(None)

    source.add_done_callback(settle)
    target.add_done_callback(lambda done: source.cancel() if done.cancelled() else None)


def _fail(outcome: asyncio.Future[None], error: BaseException) -> None:
    """Fail a batch's outcome, which a held batch's submitter never awaits: the writer has
    noted the failure, so the future is marked as retrieved."""
    if not outcome.done():
        outcome.set_exception(error)
        outcome.exception()
