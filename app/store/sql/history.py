"""The read statements a UI needs (listing sessions, a conversation's pages, a stream's
sessions), apart from the run's own statements in `queries`.

A listing's filters are optional, so its statement is built per combination of the filters in
use (eight at most) and compiled once per process and backend, like every other statement.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sqlalchemy import bindparam, literal_column, select, tuple_

from app.protocol import Message, SessionStatus
from app.store.records import SessionCursor, SessionRecord
from app.store.sql.compiling import among_ids, compile_for, dialect_for
from app.store.sql.driver import ConnectionPool, DriverSql
from app.store.sql.engines import Backend, translate_errors
from app.store.sql.rows import message_from_body, session_from_row
from app.store.sql.tables import messages, sessions


@functools.cache
def list_sessions(
    backend: Backend, *, by_status: bool, by_agent: bool, after_cursor: bool
) -> DriverSql:
    """Root sessions newest first, with the filters asked for: `statuses`, `agent_type`, and
    the cursor `before_created_at` and `before_session_id`; at most `limit`."""
    c = sessions.c
    statement = select(sessions).where(c.stream_id == c.session_id)
    if by_status:
        statement = statement.where(among_ids(backend, c.status, "statuses"))
    if by_agent:
        statement = statement.where(c.agent_type == bindparam("agent_type"))
    if after_cursor:
        statement = statement.where(
            tuple_(c.created_at, c.session_id)
            < tuple_(bindparam("before_created_at"), bindparam("before_session_id"))
        )
    statement = (
        statement.order_by(c.created_at.desc(), c.session_id.desc())
        .limit(bindparam("limit"))
        .offset(literal_column("0"))
    )
    return compile_for(statement, dialect_for(backend))


@functools.cache
def read_messages(backend: Backend) -> DriverSql:
    """A page of a session's messages by position: `session_id`, `offset`, `limit`."""
    statement = (
        select(messages.c.body)
        .where(messages.c.session_id == bindparam("session_id"))
        .where(messages.c.idx >= bindparam("offset"))
        .order_by(messages.c.idx)
        .limit(bindparam("limit"))
        .offset(literal_column("0"))
    )
    return compile_for(statement, dialect_for(backend))


@functools.cache
def stream_sessions(backend: Backend) -> DriverSql:
    """The sessions writing to `stream_id`, oldest first."""
    c = sessions.c
    statement = (
        select(sessions)
        .where(c.stream_id == bindparam("stream_id"))
        .order_by(c.created_at, c.session_id)
    )
    return compile_for(statement, dialect_for(backend))


class HistoryReads:
    """The history reads of one `SqlStore`, on its connections."""

    def __init__(
        self,
        connections: Callable[[], ConnectionPool],
        backend: Backend,
        ids: Callable[[Iterable[str | None]], list[str] | str],
    ) -> None:
        self._connections = connections
        self._backend: Backend = backend
        self._ids = ids
        self._json_as_text = backend == "sqlite"

    async def list_sessions(
        self,
        statuses: Sequence[SessionStatus],
        agent_type: str | None,
        before: SessionCursor | None,
        limit: int,
    ) -> list[SessionRecord]:
        """See `StateStore.list_sessions`."""
        statement = list_sessions(
            self._backend,
            by_status=bool(statuses),
            by_agent=agent_type is not None,
            after_cursor=before is not None,
        )
        params: dict[str, Any] = {
            "statuses": self._ids(statuses),
            "agent_type": agent_type,
            "before_created_at": None if before is None else before.created_at,
            "before_session_id": None if before is None else before.session_id,
            "limit": max(limit, 0),
        }
        return await self._sessions(statement, params, "list sessions")

    async def read_messages(self, session_id: str, offset: int, limit: int) -> list[Message]:
        """See `StateStore.read_messages`."""
        params = {"session_id": session_id, "offset": max(offset, 0), "limit": max(limit, 0)}
        with translate_errors("read messages"):
            async with self._connections().acquire() as conn:
                rows = await conn.fetch(read_messages(self._backend), params)
        return [message_from_body(body) for (body,) in rows]

    async def stream_sessions(self, stream_id: str) -> list[SessionRecord]:
        """See `StateStore.list_stream_sessions`."""
        params = {"stream_id": stream_id}
        return await self._sessions(stream_sessions(self._backend), params, "read a tree")

    async def _sessions(
        self, statement: DriverSql, params: dict[str, Any], what: str
    ) -> list[SessionRecord]:
        with translate_errors(what):
            async with self._connections().acquire() as conn:
                rows = await conn.fetch(statement, params)
        return [session_from_row(row, json_as_text=self._json_as_text) for row in rows]
