"""Every SQL statement the store runs, built once per backend so SQLAlchemy compiles each once.

The two backends differ in three places only: an id list is `= ANY(array)` on PostgreSQL (one
prepared statement whatever the list's length) and an expanding `IN` on SQLite; upserts use each
dialect's `ON CONFLICT`; and only PostgreSQL locks rows (SQLite writers hold the database lock).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    ARRAY,
    BindParameter,
    ColumnElement,
    Delete,
    Insert,
    Select,
    String,
    TextClause,
    Update,
    any_,
    bindparam,
    delete,
    func,
    insert,
    select,
    text,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.dml import ReturningDelete

from app.store.sql.engines import Backend
from app.store.sql.tables import (
    chunks,
    interrupt_flags,
    messages,
    sessions,
    streams,
    sub_session_refs,
)

STREAM_CHANNEL = "agent_server_stream"
"""The LISTEN/NOTIFY channel of stream changes; the payload is `<origin token> <stream id>`."""

INTERRUPT_CHANNEL = "agent_server_interrupt"
"""The LISTEN/NOTIFY channel of raised interrupt flags; the payload is `<origin> <session id>`."""


class Queries:
    """The statements of one backend."""

    def __init__(self, backend: Backend) -> None:
        self.backend: Backend = backend
        pg = backend == "postgresql"
        dialect_insert = postgresql.insert if pg else sqlite.insert

        def among(column: Any, name: str) -> ColumnElement[bool]:
            if pg:
                return column == any_(bindparam(name, type_=ARRAY(String)))  # type: ignore[no-any-return]
            return column.in_(bindparam(name, expanding=True))  # type: ignore[no-any-return]

        # -- writes of a batch ---------------------------------------------------------------
        self.insert_sessions: Insert = insert(sessions)
        self.update_sessions: Update = update(sessions).where(
            sessions.c.session_id == bindparam("b_session_id")
        )
        self.existing_sessions: Select[tuple[str]] = select(sessions.c.session_id).where(
            among(sessions.c.session_id, "ids")
        )
        self.message_counts: Select[tuple[str, int]] = (
            select(messages.c.session_id, func.max(messages.c.idx) + 1)
            .where(among(messages.c.session_id, "ids"))
            .group_by(messages.c.session_id)
        )
        self.insert_messages: Insert = insert(messages)

        refs = sub_session_refs.c
        next_position = (
            select(func.coalesce(func.max(refs.position), 0) + 1)
            .where(refs.parent_session_id == bindparam("b_parent_session_id"))
            .scalar_subquery()
        )
        upsert_ref = dialect_insert(sub_session_refs).values(position=next_position)
        self.upsert_refs: Insert = upsert_ref.on_conflict_do_update(
            index_elements=[refs.parent_session_id, refs.sub_session_id],
            set_={
                column.name: upsert_ref.excluded[column.name]
                for column in sub_session_refs.columns
                if column.name not in ("parent_session_id", "sub_session_id", "position")
            },
        )

        lock = select(streams.c.stream_id, streams.c.last_sequence).where(
            among(streams.c.stream_id, "ids")
        )
        self.lock_streams: Select[tuple[str, int]] = (
            lock.order_by(streams.c.stream_id).with_for_update() if pg else lock
        )
        self.insert_streams: Insert = insert(streams)
        self.advance_streams: Update = (
            update(streams)
            .where(streams.c.stream_id == bindparam("b_stream_id"))
            .values(last_sequence=bindparam("b_last_sequence"))
        )
        self.insert_chunks: Insert = insert(chunks)
        upsert_stream = dialect_insert(streams)
        self.upsert_stream_status: Insert = upsert_stream.on_conflict_do_update(
            index_elements=[streams.c.stream_id],
            set_={
                "status": upsert_stream.excluded.status,
                "stopped_at": upsert_stream.excluded.stopped_at,
            },
        )
        self.notify: TextClause = text(
            "SELECT pg_notify(:channel, :origin || ' ' || id) FROM unnest(:ids) AS id"
        ).bindparams(
            bindparam("channel", type_=String),
            bindparam("origin", type_=String),
            bindparam("ids", type_=ARRAY(String)),
        )

        # -- reads ---------------------------------------------------------------------------
        self.get_session: Select[Any] = select(sessions).where(
            sessions.c.session_id == bindparam("session_id")
        )
        self.session_by_key: Select[Any] = select(sessions).where(
            sessions.c.idempotency_key == bindparam("key")
        )
        self.load_messages: Select[tuple[str]] = (
            select(messages.c.body)
            .where(messages.c.session_id == bindparam("session_id"))
            .order_by(messages.c.idx)
        )
        self.get_refs: Select[Any] = (
            select(sub_session_refs)
            .where(refs.parent_session_id == bindparam("parent_session_id"))
            .order_by(refs.position)
        )
        self.read_chunks: Select[tuple[str]] = (
            select(chunks.c.body)
            .where(chunks.c.stream_id == bindparam("stream_id"))
            .where(chunks.c.sequence > bindparam("after"))
            .order_by(chunks.c.sequence)
            .limit(bindparam("limit"))
        )
        self.get_stream: Select[tuple[int, str]] = select(
            streams.c.last_sequence, streams.c.status
        ).where(streams.c.stream_id == bindparam("stream_id"))
        self.streams_progress: Select[tuple[str, int, str]] = select(
            streams.c.stream_id, streams.c.last_sequence, streams.c.status
        ).where(among(streams.c.stream_id, "ids"))

        # -- leases --------------------------------------------------------------------------
        now: BindParameter[int] = bindparam("now")
        self.claim: Update = (
            update(sessions)
            .where(sessions.c.session_id == bindparam("b_session_id"))
            .where(
                (sessions.c.owner_id.is_(None))
                | (sessions.c.owner_id == bindparam("b_owner_id"))
                | (func.coalesce(sessions.c.lease_expires_at, 0) < now)
            )
            .values(owner_id=bindparam("b_owner_id"), lease_expires_at=bindparam("expires"))
        )
        self.renew: Update = (
            update(sessions)
            .where(among(sessions.c.session_id, "ids"))
            .where(sessions.c.owner_id == bindparam("b_owner_id"))
            .values(lease_expires_at=bindparam("expires"))
            .returning(sessions.c.session_id)
        )
        self.release: Update = (
            update(sessions)
            .where(sessions.c.session_id == bindparam("b_session_id"))
            .where(sessions.c.owner_id == bindparam("b_owner_id"))
            .values(owner_id=None, lease_expires_at=None)
        )
        orphaned = (
            (sessions.c.owner_id.is_(None))
            | (func.coalesce(sessions.c.lease_expires_at, 0) < now)
            | (sessions.c.owner_id == bindparam("b_owner_id"))
        )
        self.orphaned: Select[Any] = (
            select(sessions)
            .where(sessions.c.status == "running")
            .where(sessions.c.stream_id == sessions.c.session_id)
            .where(orphaned)
            .order_by(sessions.c.created_at, sessions.c.session_id)
        )

        # -- interrupts ----------------------------------------------------------------------
        upsert_flag = dialect_insert(interrupt_flags)
        self.set_flag: Insert = upsert_flag.on_conflict_do_update(
            index_elements=[interrupt_flags.c.session_id],
            set_={
                "reason": upsert_flag.excluded.reason,
                "requested_at": upsert_flag.excluded.requested_at,
            },
        )
        self.take_flag: ReturningDelete[tuple[str | None, int]] = (
            delete(interrupt_flags)
            .where(interrupt_flags.c.session_id == bindparam("session_id"))
            .returning(interrupt_flags.c.reason, interrupt_flags.c.requested_at)
        )
        self.all_flags: Select[tuple[str, int]] = select(
            interrupt_flags.c.session_id, interrupt_flags.c.requested_at
        )

        # -- retention -----------------------------------------------------------------------
        self.delete_finished: Delete = delete(chunks).where(
            chunks.c.stream_id.in_(
                select(streams.c.stream_id)
                .where(streams.c.stopped_at.is_not(None))
                .where(streams.c.stopped_at < bindparam("cutoff"))
            )
        )
