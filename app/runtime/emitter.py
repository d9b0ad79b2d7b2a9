"""Numbers a root stream's chunks 1, 2, 3, ... and commits them in order, batched (group commit).

One `StreamWriter` serves a root session and all its local sub-agents. A chunk is emitted into a
pending buffer; the buffer is committed with the next step commit, or by a flush a few
milliseconds later, whichever comes first, so text deltas never cost one transaction each. Readers
see a chunk once it is committed, so a reconnecting client never sees a chunk that a crash could
take back.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from app.protocol import BaseChunk, Chunk
from app.store import ChunkAppend, StateStore, WriteBatch, now_ms


class StreamWriter:
    """The single writer of one stream within this process."""

    def __init__(
        self, store: StateStore, stream_id: str, last_sequence: int, *, flush_delay: float
    ) -> None:
        self.store = store
        self.stream_id = stream_id
        self.flush_delay = flush_delay
        self._next = last_sequence + 1
        self._pending: list[Chunk] = []
        self._flush_timer: asyncio.TimerHandle | None = None
        self._flushes: set[asyncio.Task[None]] = set()
        self._failure: BaseException | None = None

    def emit(
        self, chunk_type: type[BaseChunk], agent_id: str, agent_type: str, step: int, **fields: Any
    ) -> None:
        """Number a new chunk and queue it for the next commit."""
        chunk = chunk_type(
            sequence=self._next,
            agent_id=agent_id,
            agent_type=agent_type,
            step=step,
            timestamp=now_ms(),
            **fields,
        )
        self._next += 1
        self._pending.append(chunk)  # type: ignore[arg-type]
        if self._flush_timer is None:
            self._flush_timer = asyncio.get_running_loop().call_later(
                self.flush_delay, self._flush_soon
            )

    async def commit(self, batch: WriteBatch) -> None:
        """Commit `batch` atomically together with every chunk emitted so far.

        The store applies commits in call order, so chunks always land as a contiguous prefix.
        """
        if self._failure is not None:
            raise self._failure
        if self._pending:
            batch.chunks.append(ChunkAppend(self.stream_id, self._pending))
            self._pending = []
        if batch.is_empty():
            return
        try:
            await self.store.commit(batch)
        except BaseException as exc:
            self._failure = self._failure or exc
            raise

    async def drain(self) -> None:
        """Commit what is pending and wait for background flushes."""
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        if self._pending:
            await self.commit(WriteBatch())
        if self._flushes:
            await asyncio.gather(*self._flushes, return_exceptions=True)

    def discard(self) -> None:
        """Drop what is pending (the process is stopping as if it had crashed)."""
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        self._pending = []

    def _flush_soon(self) -> None:
        self._flush_timer = None
        if not self._pending or self._failure is not None:
            return
        task = asyncio.get_running_loop().create_task(self._flush())
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)

    async def _flush(self) -> None:
        # A failure is kept in `_failure`: the run's next commit raises it.
        with contextlib.suppress(Exception):
            await self.commit(WriteBatch())
