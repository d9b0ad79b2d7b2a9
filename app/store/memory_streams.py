"""The in-memory store's streams: their chunks, the followers waiting on them, and retention."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence

from app.errors import StreamNotFoundError
from app.protocol import STOPPED_STATUSES, Chunk, SessionStatus, chunk_to_json
from app.store.base import StreamWatch
from app.store.records import ChunkAppend, StoredChunk, StreamPage, StreamState, StreamUpdate


@dataclasses.dataclass(slots=True)
class _Stream:
    chunks: list[Chunk]
    status: SessionStatus
    stopped_at: int | None
    waiters: list[asyncio.Future[None]]
    base: int = 0
    """Chunks deleted by retention: `chunks[0]` has sequence `base + 1`."""
    stored: list[StoredChunk] = dataclasses.field(default_factory=list)
    """`chunks[:len(stored)]` serialised, once, by the first read that wanted them."""

    @property
    def last_sequence(self) -> int:
        return self.base + len(self.chunks)


class MemoryStreams:
    """The streams of `MemoryStore`: plain lists; the store calls it without awaiting, so each
    call is atomic on the event loop (a watch's wait excepted)."""

    def __init__(self) -> None:
        self._streams: dict[str, _Stream] = {}

    def last_sequence(self, stream_id: str) -> int:
        """The stream's last sequence (0 if it does not exist)."""
        stream = self._streams.get(stream_id)
        return stream.last_sequence if stream else 0

    def apply(
        self, chunk_appends: Sequence[ChunkAppend], updates: Sequence[StreamUpdate], now: int
    ) -> None:
        """A batch's chunks and stream updates, then a wake-up of the streams they touched."""
        touched: set[str] = set()
        for chunk_append in chunk_appends:
            self._stream(chunk_append.stream_id).chunks.extend(chunk_append.chunks)
            touched.add(chunk_append.stream_id)
        for update in updates:
            stream = self._stream(update.stream_id)
            stream.status = update.status
            stream.stopped_at = now if update.status in STOPPED_STATUSES else None
            touched.add(update.stream_id)
        for stream_id in touched:
            stream = self._streams[stream_id]
            if stream.waiters:
                for waiter in stream.waiters:
                    if not waiter.done():
                        waiter.set_result(None)
                stream.waiters = []

    def _stream(self, stream_id: str) -> _Stream:
        stream = self._streams.get(stream_id)
        if stream is None:
            stream = self._streams[stream_id] = _Stream([], "running", None, [])
        return stream

    def read_chunks(self, stream_id: str, after: int, limit: int) -> list[Chunk]:
        """See `StateStore.read_chunks`."""
        stream = self._streams.get(stream_id)
        if stream is None:
            return []
        start = max(after - stream.base, 0)
        return stream.chunks[start : start + limit]

    def watch(self, stream_id: str, check_open: Callable[[], None]) -> StreamWatch:
        """A watch on the stream, of a store that `check_open` says is still open."""
        return _MemoryWatch(self, stream_id, check_open)

    def _page(self, stream_id: str, after: int, limit: int) -> StreamPage:
        stream = self._streams.get(stream_id)
        if stream is None:
            raise StreamNotFoundError(f"Stream {stream_id!r} not found")
        start = max(after - stream.base, 0)
        stop = min(start + limit, len(stream.chunks))
        stored = stream.stored
        for chunk in stream.chunks[len(stored) : stop]:
            stored.append((chunk.sequence, chunk_to_json(chunk).decode()))
        return StreamPage(stored[start:stop], stream.last_sequence, stream.status)

    def get(self, stream_id: str) -> StreamState:
        """See `StateStore.get_stream`."""
        stream = self._streams.get(stream_id)
        if stream is None:
            raise StreamNotFoundError(f"Stream {stream_id!r} not found")
        return StreamState(stream_id, stream.last_sequence, stream.status)

    async def _next_change(self, stream: _Stream, timeout: float) -> None:
        waiter = asyncio.get_running_loop().create_future()
        stream.waiters.append(waiter)
        try:
            async with asyncio.timeout(timeout):
                await waiter
        except TimeoutError:
            return
        finally:
            if waiter in stream.waiters:
                stream.waiters.remove(waiter)

    def delete_stopped_before(self, cutoff: int) -> int:
        """Forget the chunks of the streams stopped before `cutoff`; returns how many."""
        deleted = 0
        for stream in self._streams.values():
            if stream.stopped_at is not None and stream.stopped_at < cutoff:
                stream.stopped_at = None  # purged: as the SQL store, the next cleanup skips it
                deleted += len(stream.chunks)
                stream.base += len(stream.chunks)
                stream.chunks = []
                stream.stored = []
        return deleted


class _MemoryWatch(StreamWatch):
    def __init__(
        self, streams: MemoryStreams, stream_id: str, check_open: Callable[[], None]
    ) -> None:
        self._streams = streams
        self._stream_id = stream_id
        self._check_open = check_open
        self._seen: tuple[int, SessionStatus] | None = None

    async def read(self, *, after: int, limit: int) -> StreamPage:
        self._check_open()
        page = self._streams._page(self._stream_id, after, limit)
        self._seen = (page.last_sequence, page.status)
        return page

    async def wait(self, timeout: float) -> None:
        self._check_open()
        stream = self._streams._stream(self._stream_id)
        if (stream.last_sequence, stream.status) == self._seen:
            await self._streams._next_change(stream, timeout)
