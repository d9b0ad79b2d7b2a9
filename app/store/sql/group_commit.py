"""Group commit: one writer task per store applies concurrent batches many per transaction.

Callers queue their batch and await its own outcome. The writer takes the queued batches in
arrival order (at most `max_batches` and about `max_rows` rows) and applies them in one
transaction, so a hundred concurrent runs cost a handful of transactions, and one stream's
chunks land in the order they were committed. A batch its caller does not wait for (`hold`) may
wait a moment for one that someone waits for, so the two cost one transaction, not two in a row.

When a grouped transaction fails, each of its batches is applied again in a transaction of its
own: the bad batch fails with its own error and the others land, except, when the database
failed it (rather than a rule), the batches of its streams that follow it: they may build on it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from app.errors import (
    AgentServerError,
    ConflictError,
    NotFoundError,
    StoreClosedError,
    StoreError,
    StoreRefusedError,
    StoreUnavailableError,
)
from app.store.records import WriteBatch
from app.store.sql.writes import batch_size

logger = logging.getLogger(__name__)

UNWRITABLE = (ValueError, TypeError, OverflowError)
"""What making a batch's rows raises for a value no store can write (serialisation errors are
`ValueError`s, a too large integer an `OverflowError` or a `TypeError`)."""

Apply = Callable[[Sequence[WriteBatch]], Awaitable[None]]
"""Applies batches in one transaction, committing it; raises (having rolled back) on failure."""


@dataclass(slots=True)
class _Pending:
    batch: WriteBatch
    size: int
    outcome: asyncio.Future[None]
    held: bool
    settled: Callable[[], None] | None
    """Called once the writer is done with the batch: settled, or dropped as withdrawn."""


class GroupCommitter:
    """Queues `WriteBatch`es for one writer task that commits them in groups, in arrival order.

    A caller cancelled while its batch waits in the queue withdraws it; once the writer has taken
    the batch, it is applied even if its caller has gone.
    """

    def __init__(
        self, apply: Apply, *, max_batches: int = 128, max_rows: int = 4096, hold: float = 0.0
    ) -> None:
        self._apply = apply
        self._max_batches = max_batches
        self._max_rows = max_rows
        self._hold = hold
        """Seconds an idle writer keeps held batches waiting for one someone waits for."""
        self._queue: collections.deque[_Pending] = collections.deque()
        self._wakeup = asyncio.Event()
        self._awaited = asyncio.Event()
        """Set when a batch that is not held is queued (or the writer closes)."""
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._applying_since: float | None = None
        self.groups = 0
        """Transactions committed so far (for benchmarks and tests)."""

    def start(self) -> None:
        """Start the writer task."""
        self._task = asyncio.create_task(self._run(), name="sql-store-group-commit")

    def enqueue(
        self,
        batch: WriteBatch,
        *,
        hold: bool = False,
        outcome: asyncio.Future[None] | None = None,
        settled: Callable[[], None] | None = None,
    ) -> asyncio.Future[None]:
        """Queue `batch` now; the future (`outcome`, else a new one) resolves once it is
        committed (cancel it to withdraw the batch while it is still queued). A `hold` batch may
        wait up to the writer's `hold` seconds for a batch that is not, to be committed with it.
        `settled` is called when the writer is done with the batch, even if its caller is gone:
        it has landed or failed, or was dropped from the queue as withdrawn."""
        if self._closing or self._task is None:
            raise StoreClosedError("The store's writer is not running")
        if outcome is None:
            outcome = asyncio.get_running_loop().create_future()
        self._queue.append(_Pending(batch, batch_size(batch), outcome, hold, settled))
        if not hold:
            self._awaited.set()
        self._wakeup.set()
        return outcome

    async def close(self) -> None:
        """Commit what is queued, then stop the writer."""
        self._closing = True
        self._wakeup.set()
        self._awaited.set()
        if self._task is not None:
            await self._task

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            await self._linger()
            while group := self._take():
                await self._commit(group)
            if self._closing:
                return

    async def _linger(self) -> None:
        """While only held batches are queued, give one that someone waits for a moment to
        join them: when it comes, both are committed at once."""
        queue = self._queue
        if not (self._hold and queue) or self._closing or not all(p.held for p in queue):
            return
        self._awaited.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._hold):
                await self._awaited.wait()

    def _fail_followers(self, streams: set[str] | frozenset[str], cause: Exception) -> None:
        """Fail the queued batches of streams whose earlier batch just failed: they were
        submitted before anyone could know, and may build on it (a chunk sequence, a message
        index, a child's record). Called as the failure is settled, so a batch submitted in
        answer to it is not among them."""
        if not streams:
            return
        for pending in list(self._queue):
            if pending.batch.stream_ids() & streams:
                self._queue.remove(pending)
                _settle(pending, _after_failure(pending.batch.stream_ids() & streams, cause))

    def _take(self) -> list[_Pending]:
        group: list[_Pending] = []
        rows = 0
        while self._queue and len(group) < self._max_batches:
            pending = self._queue[0]
            if pending.outcome.done():  # withdrawn by its caller
                self._queue.popleft()
                _settle(pending, None)
                continue
            if group and rows + pending.size > self._max_rows:
                break
            self._queue.popleft()
            group.append(pending)
            rows += pending.size
        return group

    def busy_for(self) -> float:
        """Seconds the writer has been applying its current group (0 when idle)."""
        since = self._applying_since
        return 0.0 if since is None else time.monotonic() - since

    async def _commit(self, group: list[_Pending]) -> None:
        self._applying_since = time.monotonic()
        try:
            await self._commit_group(group)
        finally:
            self._applying_since = None

    async def _commit_group(self, group: list[_Pending]) -> None:
        try:
            await self._apply([pending.batch for pending in group])
        except Exception as exc:
            if len(group) == 1:
                _settle(group[0], exc)
                if _may_leave_followers_stranded(exc):
                    self._fail_followers(group[0].batch.stream_ids(), exc)
                return
            logger.debug("A group of %d batches failed; applying them one by one", len(group))
            failed: dict[str, Exception] = {}
            for pending in group:
                streams = pending.batch.stream_ids()
                if not streams.isdisjoint(failed):
                    cause = next(failed[stream] for stream in streams if stream in failed)
                    _settle(pending, _after_failure(streams & failed.keys(), cause))
                    continue
                try:
                    await self._apply([pending.batch])
                except Exception as single:
                    _settle(pending, single)
                    if _may_leave_followers_stranded(single):
                        failed.update(dict.fromkeys(streams, single))
                        self._fail_followers(streams, single)
                else:
                    self.groups += 1
                    _settle(pending, None)
            return
        except BaseException:
            for pending in group:
                _settle(pending, StoreClosedError("The store closed before the batch committed"))
            raise
        self.groups += 1
        for pending in group:
            _settle(pending, None)


def _may_leave_followers_stranded(error: Exception) -> bool:
    """Whether the batches that follow a failed one on its streams must fail too. A batch the
    rules refused (a session exists or is missing, a message or chunk does not follow) tells of
    a conflict the rules also judge its followers by, each on its own; another failure (the
    database or the connection) says nothing of them, and they may build on what did not land."""
    return not isinstance(error, ConflictError | NotFoundError)


def _after_failure(streams: set[str] | frozenset[str], cause: Exception) -> StoreError:
    """The error of a batch not applied because an earlier one of its streams failed with
    `cause`: refused as it was refused (the stream cannot go on as it was written), else
    unavailable (it may once the store is back)."""
    refused = isinstance(cause, StoreRefusedError) or not isinstance(cause, AgentServerError)
    kind = StoreRefusedError if refused else StoreUnavailableError
    return kind(
        f"An earlier write of stream {min(streams)!r} failed, so this one, which follows it, "
        "was not applied"
    )


def _settle(pending: _Pending, error: Exception | None) -> None:
    if pending.settled is not None:
        pending.settled()
    if pending.outcome.done():
        return
    if error is None:
        pending.outcome.set_result(None)
    elif isinstance(error, AgentServerError):
        pending.outcome.set_exception(error)
    else:
        logger.exception("The store's writer could not write a batch", exc_info=error)
        # A value the batch's rows could not be made of (one that does not serialise, a number
        # no column holds) would fail the same way again; anything else may not.
        kind = StoreRefusedError if isinstance(error, UNWRITABLE) else StoreUnavailableError
        failure = kind(f"The store's writer failed: {type(error).__name__}: {error}")
        failure.__cause__ = error
        pending.outcome.set_exception(failure)


async def cancel_quietly(task: asyncio.Task[None] | None) -> None:
    """Cancel `task` and wait for it, swallowing its cancellation."""
    if task is None or task.done():
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
