"""The slots of background `subagent` sessions: at most `cap` of them run at once, across every
process on the store, and they start in the order they were queued.

The queue is durable (the store's `background_queue`); this object only wakes the runs of this
process that wait for a slot. A claim (`StateStore.claim_queued`) looks at the first free
places of the whole queue and takes those that wait here; a head that waits in another process
keeps its place and its slot until that process claims it. A claim runs when a session is
queued, when one of this process's background sessions ends, when the store tells of a write
that may have freed a slot (`StateStore.add_queue_listener`: another process's too, on
PostgreSQL), and every `poll` seconds while some wait (a slot freed by another process that the
store does not tell of: SQLite, or a PostgreSQL listener that is reconnecting). See
docs/architecture.md, "Background delegation".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

from app.store import StateStore, now_ms

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BackgroundSettings:
    """How background `subagent` sessions are run."""

    concurrency: int = 5
    """How many run at once across every process on the store."""
    poll: float = 0.5
    """Seconds between looks for a slot another process freed, while some wait here (the
    fallback on PostgreSQL, where such a slot is told of at once)."""
    timeout: float | None = None
    """Seconds a `subagent` child may run when neither its call nor its agent says."""


class Scheduler:
    """Grants this process's waiting background sessions their slots (see the module)."""

    def __init__(self, store: StateStore, *, cap: int, poll: float) -> None:
        self.store = store
        self.cap = cap
        self.poll = poll
        self._waiting: dict[str, asyncio.Future[None]] = {}
        self._claiming = asyncio.Lock()
        """Held by a claim, and by a withdrawal: a session withdrawn is never granted."""
        self._poked = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None

    async def slot(self, session_id: str) -> None:
        """Wait until the session holds a slot (its queue entry is `running`)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[session_id] = future
        self.poke()
        try:
            await future
        finally:
            if self._waiting.get(session_id) is future:
                del self._waiting[session_id]

    async def withdraw(self, session_id: str) -> bool:
        """Take a waiting session out of this process's claims: whether it still waited (it
        will not be granted a slot here from now on)."""
        async with self._claiming:
            future = self._waiting.pop(session_id, None)
            return future is not None and not future.done()

    def poke(self) -> None:
        """Claim soon: a session was queued, or a slot may be free."""
        if not self._waiting:
            return
        self._poked.set()
        if self._loop is None or self._loop.done():
            self._loop = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        """Stop claiming (the runtime stops)."""
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop

    async def _run(self) -> None:
        while self._waiting:
            self._poked.clear()
            try:
                await self.claim()
            except Exception:
                logger.exception("Claiming background slots failed")
            if not self._waiting:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poked.wait(), self.poll)

    async def claim(self) -> list[str]:
        """Claim the free slots whose heads wait here; the sessions granted."""
        async with self._claiming:
            waiting = [sid for sid, future in self._waiting.items() if not future.done()]
            if not waiting:
                return []
            granted = await self.store.claim_queued(self.cap, waiting, now_ms())
            for session_id in granted:
                future = self._waiting.pop(session_id, None)
                if future is not None and not future.done():
                    future.set_result(None)
            return granted
