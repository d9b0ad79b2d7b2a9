"""Following a stream from the store: replay after a sequence, then the live tail, then the end.

Readers only ever see committed chunks, so what they receive never has to be taken back, and any
process sharing the store can serve any stream.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator

from app.protocol import STOPPED_STATUSES, Chunk, SessionStatus, chunk_from_json
from app.store import StateStore
from app.store.records import StoredChunk

PAGE_SIZE = 500
"""Chunks per store read: what one SSE write sends at most."""


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

    async def __aiter__(self) -> AsyncIterator[Chunk]:
        async for page in self.pages():
            for _, body in page:
                yield chunk_from_json(body)

    async def pages(self, *, idle: float | None = None) -> AsyncGenerator[list[StoredChunk]]:
        """The same chunks as stored (sequence and wire JSON), a page of what the store had at a
        time, for writers that send the bytes of a page at once. The first page comes at once,
        even empty: `StreamNotFoundError` is raised instead when the stream does not exist.
        So does the last, with `status` already set, so a writer can send the end with it.
        With `idle`, an empty page also comes after that many seconds without one: a writer's
        cue for a heartbeat."""
        clock = time.monotonic
        async with self.store.watch_stream(self.stream_id) as watch:
            first = True
            quiet_since = clock()
            while True:
                page = await watch.read(after=self.after, limit=PAGE_SIZE)
                # A short page holds every chunk the stream had when its status was read, but
                # for those retention deleted (only ever of a stopped stream).
                last = len(page.chunks) < PAGE_SIZE and page.status in STOPPED_STATUSES
                if last:
                    self.status = page.status
                if (
                    page.chunks
                    or first
                    or last
                    or (idle is not None and clock() - quiet_since >= idle)
                ):
                    first = False
                    if page.chunks:
                        self.after = page.chunks[-1][0]
                    yield page.chunks
                    quiet_since = clock()
                if last:
                    return
                if len(page.chunks) < PAGE_SIZE:
                    wait = self.poll
                    if idle is not None:
                        wait = min(wait, max(idle - (clock() - quiet_since), 0.0))
                    await watch.wait(wait)
