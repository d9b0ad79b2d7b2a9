"""`SqlStore`'s methods that run straight on a pooled connection: reads, leases, flags, cleanup."""

from __future__ import annotations

import abc
from collections.abc import Sequence

from app.errors import SessionNotFoundError, StreamNotFoundError
from app.protocol import Chunk, Message, SubSessionRef
from app.store.base import StateStore, now_ms
from app.store.records import (
    InboxMessage,
    InterruptFlag,
    SessionRecord,
    StoredChunk,
    StreamPage,
    StreamState,
)
from app.store.sql.driver import ConnectionPool, DriverSql
from app.store.sql.engines import translate_errors
from app.store.sql.queries import Queries
from app.store.sql.rows import chunk_from_body, message_from_body, ref_from_row, session_from_row
from app.store.sql.watch import Progress


class DirectMethods(StateStore):
    """The `StateStore` methods that need nothing of `SqlStore` but its pool and statements: a
    statement or a few on one pooled connection, not through the group committer, waking no one.
    `SqlStore` inherits them."""

    _queries: Queries
    _json_as_text: bool

    @property
    @abc.abstractmethod
    def _connections(self) -> ConnectionPool:
        """The open store's pool."""

    # -- sessions ------------------------------------------------------------------------------

    async def get_session(self, session_id: str) -> SessionRecord:
        """The session, or `SessionNotFoundError`."""
        record = await self._session(self._queries.get_session, {"session_id": session_id})
        if record is None:
            raise SessionNotFoundError(f"Session {session_id!r} not found")
        return record

    async def find_session_by_idempotency_key(self, key: str) -> SessionRecord | None:
        """The session created with this idempotency key, if any."""
        return await self._session(self._queries.session_by_key, {"key": key})

    async def _session(self, statement: DriverSql, params: dict[str, str]) -> SessionRecord | None:
        self._check_open()
        with translate_errors("read a session"):
            async with self._connections.acquire() as conn:
                rows = await conn.fetch(statement, params)
        return session_from_row(rows[0], json_as_text=self._json_as_text) if rows else None

    async def load_messages(self, session_id: str) -> list[Message]:
        """The session's conversation, oldest first."""
        self._check_open()
        with translate_errors("read messages"):
            async with self._connections.acquire() as conn:
                rows = await conn.fetch(self._queries.load_messages, {"session_id": session_id})
        return [message_from_body(body) for (body,) in rows]

    async def read_inbox(self, session_id: str) -> list[InboxMessage]:
        self._check_open()
        with translate_errors("read the inbox"):
            async with self._connections.acquire() as conn:
                rows = await conn.fetch(self._queries.read_inbox, {"session_id": session_id})
        return [InboxMessage(number, session_id, content, at) for number, content, at in rows]

    async def get_sub_session_refs(self, parent_session_id: str) -> list[SubSessionRef]:
        """The parent's refs, in the order they were first added."""
        self._check_open()
        params = {"parent_session_id": parent_session_id}
        with translate_errors("read sub-session refs"):
            async with self._connections.acquire() as conn:
                rows = await conn.fetch(self._queries.get_refs, params)
        return [ref_from_row(row) for row in rows]

    # -- leases --------------------------------------------------------------------------------

    async def claim_session(self, session_id: str, owner_id: str, lease_ms: int) -> bool:
        """Take the lease if free, expired or already ours."""
        self._check_open()
        now = now_ms()
        params = {
            "b_session_id": session_id,
            "b_owner_id": owner_id,
            "now": now,
            "expires": now + lease_ms,
        }
        with translate_errors("claim a session"):
            async with self._connections.acquire() as conn:
                claimed = await conn.execute(self._queries.claim, params) == 1
        if not claimed:
            await self.get_session(session_id)
        return claimed

    async def renew_leases(
        self, owner_id: str, session_ids: Sequence[str], lease_ms: int
    ) -> set[str]:
        """Extend the leases we hold; returns those ids."""
        self._check_open()
        if not session_ids:
            return set()
        params = {
            "ids": self._queries.ids(session_ids),
            "b_owner_id": owner_id,
            "expires": now_ms() + lease_ms,
        }
        queries = self._queries
        with translate_errors("renew leases"):
            async with self._connections.acquire() as conn:
                rows = await conn.fetch(queries.renew_unheld, params)
                renewed = {session_id for (session_id,) in rows}
                # Those a commit held (or that are not ours), one by one (see `renew_one`).
                for session_id in session_ids:
                    if session_id not in renewed:
                        one = {**params, "b_session_id": session_id}
                        rows = await conn.fetch(queries.renew_one, one)
                        renewed.update(session_id for (session_id,) in rows)
        return renewed

    async def release_session(self, session_id: str, owner_id: str) -> None:
        """Give up our lease on the session."""
        self._check_open()
        params = {"b_session_id": session_id, "b_owner_id": owner_id}
        with translate_errors("release a session"):
            async with self._connections.acquire() as conn:
                await conn.execute(self._queries.release, params)

    async def orphaned_trees(self, *, owner_id: str | None = None) -> list[SessionRecord]:
        """Roots of trees with a running session and no live owner (or held by `owner_id`)."""
        self._check_open()
        params = {"now": now_ms(), "b_owner_id": owner_id}
        with translate_errors("list orphaned trees"):
            async with self._connections.acquire() as conn:
                rows = await conn.fetch(self._queries.orphaned, params)
        return [session_from_row(row, json_as_text=self._json_as_text) for row in rows]

    # -- interrupts ----------------------------------------------------------------------------

    async def check_interrupt_flag(self, session_id: str) -> InterruptFlag | None:
        """Atomically read and clear the flag (DELETE ... RETURNING)."""
        self._check_open()
        with translate_errors("check an interrupt flag"):
            async with self._connections.acquire() as conn:
                rows = await conn.fetch(self._queries.take_flag, {"session_id": session_id})
        return InterruptFlag(session_id, rows[0][0], rows[0][1]) if rows else None

    # -- streams -------------------------------------------------------------------------------

    async def read_chunks(
        self, stream_id: str, *, after: int = 0, limit: int = 1000
    ) -> list[Chunk]:
        """Chunks with sequence > `after`, in order, at most `limit`."""
        self._check_open()
        params = {"stream_id": stream_id, "after": after, "limit": limit}
        with translate_errors("read chunks"):
            async with self._connections.acquire() as conn:
                rows = await conn.fetch(self._queries.read_chunks, params)
        return [chunk_from_body(body) for (body,) in rows]

    async def _read_page(self, stream_id: str, after: int, limit: int) -> StreamPage:
        self._check_open()
        params = {"stream_id": stream_id, "after": after, "limit": limit}
        with translate_errors("read chunks"):
            async with self._connections.acquire() as conn:
                rows = await conn.fetch(self._queries.read_page, params)
        stored: list[StoredChunk] = []
        progress: Progress | None = None
        for sequence, body, last_sequence in rows:
            if last_sequence is None:
                stored.append((sequence, body))
            else:
                progress = (last_sequence, body)
        if progress is None:
            raise StreamNotFoundError(f"Stream {stream_id!r} not found")
        return StreamPage(stored, progress[0], progress[1])

    async def get_stream(self, stream_id: str) -> StreamState:
        """The stream's last sequence and status, or `StreamNotFoundError`."""
        self._check_open()
        with translate_errors("read a stream"):
            async with self._connections.acquire() as conn:
                rows = await conn.fetch(self._queries.get_stream, {"stream_id": stream_id})
        if not rows:
            raise StreamNotFoundError(f"Stream {stream_id!r} not found")
        return StreamState(stream_id, rows[0][0], rows[0][1])

    async def delete_finished_streams(self, *, older_than_ms: int) -> int:
        """Delete the chunks of streams stopped before `now - older_than_ms`."""
        self._check_open()
        q = self._queries
        params = {"cutoff": now_ms() - older_than_ms}
        with translate_errors("delete finished streams"):
            async with self._connections.acquire() as conn:
                if q.forget_stopped is None:
                    return await conn.execute(q.purge_stopped, params)
                async with conn.transaction():
                    deleted = await conn.execute(q.purge_stopped, params)
                    await conn.execute(q.forget_stopped, params)
                return deleted
