"""Watching streams: who waits on which stream, what they last read, and reads they share.

`StreamWaiters` keeps one wake-up event per watched stream and judges each notification against
what the watchers last read, so a change they have already seen wakes no one. It also keeps the
chunks this process last committed to each watched stream (its `_Tail`), so followers at the live
tail of a run this process writes read them without a query. `WaitersWatch` is the store's
`StreamWatch` over it, and `SharedReads` lets followers woken together at a stream's live tail
share one query. What wakes the waiters (in-process commits, PostgreSQL notifications, the
poller) is in `notify`.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from app.protocol import SessionStatus
from app.store.base import StreamWatch
from app.store.records import StoredChunk, StreamPage

Progress = tuple[int, SessionStatus]
"""A stream's last sequence and status."""


class _Unknown(enum.Enum):
    UNKNOWN = enum.auto()


UNKNOWN = _Unknown.UNKNOWN
"""No one has read the stream since its waiters were last woken."""

Seen = Progress | None | _Unknown
"""What is known of a stream: its progress, None if it does not exist yet, or UNKNOWN."""


Change = tuple[int | None, str | None]
"""What a notification reports of a stream: its new last sequence and status, where changed."""


def _newer(change: Change, seen: Progress | None) -> bool:
    sequence, status = change
    return (
        seen is None
        or (sequence is not None and sequence > seen[0])
        or (status is not None and status != seen[1])
    )


TAIL_CHUNKS = 256
"""The most chunks a stream's tail keeps (about 50 kB): a follower at the live tail is a few
chunks behind; one further behind reads the store."""


@dataclass(slots=True)
class _Tail:
    """The end of a stream as this process committed it: `chunks` are exactly the stored chunks
    up to `last`, contiguous. `status` is the stream's status at `last`, once a commit of this
    process set it or a read of the store confirmed it; None until then."""

    chunks: list[StoredChunk]
    last: int
    status: SessionStatus | None

    def page(self, after: int, limit: int) -> StreamPage | None:
        """The page after `after`, if the tail holds all of it and knows the status."""
        first = self.chunks[0][0] if self.chunks else self.last + 1
        if self.status is None or not first - 1 <= after <= self.last:
            return None
        start = after - first + 1
        return StreamPage(self.chunks[start : start + limit], self.last, self.status)


@dataclass(slots=True)
class _Waited:
    event: asyncio.Event = field(default_factory=asyncio.Event)
    waiters: int = 0
    known: Seen = UNKNOWN
    """The stream as last read by a waiter or the poller."""
    pending: list[Change] = field(default_factory=list)
    """Notifications that arrived while `known` was UNKNOWN, judged by the next read."""
    read: Progress | None = None
    """The furthest progress a read of the store saw (it may seed a tail's status)."""
    tail: _Tail | None = None


class StreamWaiters:
    """One event per waited stream; waking sets it and gives later waiters a fresh one."""

    def __init__(self) -> None:
        self._streams: dict[str, _Waited] = {}

    def __bool__(self) -> bool:
        return bool(self._streams)

    def __contains__(self, stream_id: object) -> bool:
        return stream_id in self._streams

    def register(self, stream_id: str) -> None:
        """Start watching the stream: its wake-ups set its `current` event from now on."""
        waited = self._streams.get(stream_id)
        if waited is None:
            waited = self._streams[stream_id] = _Waited()
        waited.waiters += 1

    def current(self, stream_id: str) -> asyncio.Event:
        """The event the stream's next wake-up sets (the stream must be registered)."""
        return self._streams[stream_id].event

    def note(self, stream_id: str, progress: Progress | None) -> bool:
        """Record what a waiter read after registering; False when it is already stale."""
        waited = self._streams[stream_id]
        known = waited.known
        if known is UNKNOWN:
            if any(_newer(change, progress) for change in waited.pending):
                return False
            waited.known = progress
            waited.pending.clear()
            return True
        if known is not None and progress is not None and progress[0] > known[0]:
            # The read went further than what was known: it came from this process's tail,
            # past a poll that read the store before this process's last commit. It is the
            # newest view, not a stale one (judged stale, every tail read would be, and a
            # follower would read and "wake" forever without giving the loop back).
            waited.known = progress
            return True
        return known == progress

    def release(self, stream_id: str) -> None:
        """Stop waiting on the stream."""
        waited = self._streams[stream_id]
        waited.waiters -= 1
        if waited.waiters == 0:
            del self._streams[stream_id]

    def landed(
        self, stream_id: str, chunks: list[StoredChunk], status: SessionStatus | None
    ) -> None:
        """This process committed `chunks` to the stream (maybe none), and `status` when it
        set one: the tail grows, or starts again from them."""
        waited = self._streams.get(stream_id)
        if waited is None:
            return
        tail = waited.tail
        if not chunks:
            if tail is not None and status is not None:
                tail.status = status
            return
        first, last = chunks[0][0], chunks[-1][0]
        if tail is not None and tail.last == first - 1:
            tail.chunks.extend(chunks)
            tail.last = last
            if status is not None:
                tail.status = status
        else:
            read = waited.read
            if status is None and read is not None and read[0] == first - 1:
                status = read[1]
            tail = waited.tail = _Tail(list(chunks), last, status)
        if len(tail.chunks) > TAIL_CHUNKS:
            del tail.chunks[: len(tail.chunks) - TAIL_CHUNKS]

    def tail_page(self, stream_id: str, after: int, limit: int) -> StreamPage | None:
        """The page from the stream's tail, when it holds it (see `_Tail.page`)."""
        waited = self._streams.get(stream_id)
        if waited is None or waited.tail is None:
            return None
        return waited.tail.page(after, limit)

    def _confirm(self, waited: _Waited, progress: Progress) -> None:
        """A read of the store saw `progress`. One at the tail's end confirms its status; one
        beyond it means another process wrote, and the tail no longer tells the whole stream
        (an older one was read before this process's last commit, and tells nothing)."""
        if waited.read is None or progress[0] >= waited.read[0]:
            waited.read = progress
        tail = waited.tail
        if tail is None or progress[0] < tail.last:
            return
        if progress[0] == tail.last and tail.status in (None, progress[1]):
            tail.status = progress[1]
        else:
            waited.tail = None

    def read_from_store(self, stream_id: str, progress: Progress) -> None:
        """A follower read the stream's progress from the store."""
        waited = self._streams.get(stream_id)
        if waited is not None:
            self._confirm(waited, progress)

    def wake(self, stream_ids: set[str] | list[str], *, seen: Seen = UNKNOWN) -> None:
        """Wake the streams' waiters."""
        for stream_id in stream_ids:
            waited = self._streams.get(stream_id)
            if waited is not None:
                waited.event.set()
                waited.event = asyncio.Event()
                waited.known = seen
                waited.pending.clear()

    def wake_all(self) -> None:
        """Wake every waiter (a reconnect or close: whatever happened meanwhile is unknown, so
        no tail is trusted any more)."""
        for waited in self._streams.values():
            waited.tail = None
        self.wake(list(self._streams))

    def waited(self) -> list[str]:
        """The streams someone waits on."""
        return list(self._streams)

    def notified(self, stream_id: str, sequence: int | None, status: str | None) -> None:
        """Another process changed the stream: wake its waiters unless they have seen it.

        A notification may arrive after a waiter already read what it reports; only what is
        newer than the waiter's read (a higher sequence, another status) wakes it. One that
        arrives before the waiter's read is judged against that read (`note`).
        """
        waited = self._streams.get(stream_id)
        if waited is None:
            return
        waited.tail = None  # another process wrote: this one's commits are not the whole stream
        if waited.known is UNKNOWN:
            waited.pending.append((sequence, status))
        elif _newer((sequence, status), waited.known):
            self.wake([stream_id])

    def observe(self, stream_id: str, progress: Progress) -> None:
        """The poller read the stream: wake its waiters if it moved since last seen."""
        waited = self._streams.get(stream_id)
        if waited is None:
            return
        self._confirm(waited, progress)
        if waited.known is UNKNOWN:
            if any(_newer(change, progress) for change in waited.pending):
                self.wake([stream_id], seen=progress)
            else:
                waited.known = progress
                waited.pending.clear()
        elif waited.known != progress:
            self.wake([stream_id], seen=progress)


PageRead = Callable[[str, int, int], Awaitable[StreamPage]]
"""Reads a page of a stream: stream id, after, limit."""


class SharedReads:
    """Runs identical page reads of one stream once: many followers at the live tail of a
    stream, woken together, ask for the same page, and one query answers them all.

    A read is shared only by watches that took the same wake-up event before reading: no wake-up
    came between their starts, so each may take the page as its own read (a follower behind
    the tail asks for another page and reads on its own).
    """

    def __init__(self, read: PageRead) -> None:
        self._read = read
        self._running: dict[tuple[str, int, int, asyncio.Event], asyncio.Future[StreamPage]] = {}

    async def read(
        self, stream_id: str, after: int, limit: int, changed: asyncio.Event
    ) -> StreamPage:
        """The page, from a read already running for the same wake-up or from a new one."""
        key = (stream_id, after, limit, changed)
        shared = self._running.get(key)
        if shared is None:
            shared = self._running[key] = asyncio.ensure_future(self._read(stream_id, after, limit))
            shared.add_done_callback(lambda done: self._finished(key, done))
        # Shielded: a follower that goes away does not cancel the others' read.
        return await asyncio.shield(shared)

    def _finished(
        self, key: tuple[str, int, int, asyncio.Event], done: asyncio.Future[StreamPage]
    ) -> None:
        del self._running[key]
        if not done.cancelled():
            done.exception()  # retrieved, so an error no one awaited any more is not logged


class WaitersWatch(StreamWatch):
    """A `StreamWatch` over `StreamWaiters`: registered for its whole life, it takes the wake-up
    event before each read, so a wake-up between the read and the wait is never lost, and the
    read's progress is what a later notification is judged against."""

    def __init__(
        self,
        waiters: StreamWaiters,
        stream_id: str,
        reads: SharedReads,
        before_wait: Callable[[], None],
    ) -> None:
        self._waiters = waiters
        self._stream_id = stream_id
        self._reads = reads
        self._before_wait = before_wait
        self._changed: asyncio.Event | None = None
        self._seen: Progress | None = None

    async def read(self, *, after: int, limit: int) -> StreamPage:
        changed = self._changed = self._waiters.current(self._stream_id)
        page = self._waiters.tail_page(self._stream_id, after, limit)
        if page is None:
            page = await self._reads.read(self._stream_id, after, limit, changed)
            self._waiters.read_from_store(self._stream_id, (page.last_sequence, page.status))
        self._seen = (page.last_sequence, page.status)
        return page

    async def wait(self, timeout: float) -> None:
        changed = self._changed
        if changed is None or changed.is_set():
            return
        if not self._waiters.note(self._stream_id, self._seen):
            return  # what the read saw is stale already
        self._before_wait()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await changed.wait()
