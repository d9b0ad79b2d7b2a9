"""Following a stream from the store: replay after a sequence, then the live tail, then the end.

Readers only ever see committed chunks, so what they receive never has to be taken back, and any
process sharing the store can serve any stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from app.protocol import STOPPED_STATUSES, Chunk, SessionStatus, chunk_from_json
from app.store import StateStore
from app.store.base import StoredChunk


class StreamFollower:
    """Yields a stream's chunks with sequence > `after`, in order, until its run stops.

    After the iteration ends, `status` holds the status the run stopped with.
    """

    def __init__(
        self, store: StateStore, stream_id: str, *, after: int = 0, poll: float = 1.0
    ) -> None:
        self.store = store
        self.stream_id = stream_id
        self.after = max(after, 0)
        self.poll = poll
        self.status: SessionStatus | None = None
        self._gone = -1

    async def __aiter__(self) -> AsyncIterator[Chunk]:
        async for page in self.pages():
            for _, body in page:
                yield chunk_from_json(body)

    async def pages(self) -> AsyncIterator[list[StoredChunk]]:
        """The same chunks as stored (sequence and wire JSON), a page of what the store had at a
        time, for writers that send the bytes of a page at once."""
        size = 500
        while True:
            chunks = await self.store.read_chunk_json(self.stream_id, after=self.after, limit=size)
            if chunks:
                self.after = chunks[-1][0]
                yield chunks
                continue
            state = await self.store.get_stream(self.stream_id)
            if state.last_sequence <= self.after:
                if state.status in STOPPED_STATUSES:
                    self.status = state.status
                    return
                await self.store.wait_for_stream(
                    self.stream_id, after=self.after, timeout=self.poll
                )
            elif state.status in STOPPED_STATUSES and state.last_sequence == self._gone:
                # Retention deleted what is left of this finished stream: nothing more to read.
                self.status = state.status
                return
            else:
                self._gone = state.last_sequence
