"""Every SQL statement of the store, written once in SQLAlchemy Core and compiled per driver.

Each statement is compiled once per process and backend (`queries_for`) to the driver's
positional SQL (`DriverSql`), so running it costs the driver's time only. The backends differ in
four places: an id list is `= ANY(array)` on PostgreSQL and `IN (SELECT value FROM json_each(...))`
on SQLite (either way one fixed statement whatever the list's length); only PostgreSQL locks rows
(a SQLite writer holds the database lock); PostgreSQL writes a group in one statement
(`pg_write`) where SQLite runs one executemany per table; and only PostgreSQL sends
notifications.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from typing import Any

from sqlalchemy import (
    ARRAY,
    BigInteger,
    BindParameter,
    ColumnElement,
    String,
    Table,
    bindparam,
    delete,
    func,
    insert,
    literal_column,
    null,
    select,
    text,
    union_all,
    update,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.elements import ClauseElement

from app.store.sql.compiling import among_ids, compile_for, dialect_for, upsert
from app.store.sql.driver import DriverSql
from app.store.sql.engines import Backend
from app.store.sql.pg_write import build_write_all
from app.store.sql.rows import UPDATED_COLUMNS
from app.store.sql.tables import (
    background_queue,
    chunks,
    inbox,
    interrupt_flags,
    messages,
    sessions,
    streams,
    sub_session_refs,
)

STREAM_CHANNEL = "agent_server_stream"
"""The LISTEN/NOTIFY channel of stream changes (payload: see `plan.stream_change_payloads`)."""

INTERRUPT_CHANNEL = "agent_server_interrupt"
"""The LISTEN/NOTIFY channel of raised interrupt flags; the payload is `<origin> <session id>`."""

QUEUE_CHANNEL = "agent_server_queue"
"""The LISTEN/NOTIFY channel of writes that may free a background slot; the payload is
`<origin>`."""

CHECK_EXISTING_SESSION = 0
CHECK_EXISTING_KEY = 1
CHECK_NEXT_MESSAGE = 2
CHECK_LAST_SEQUENCE = 3


def _insert(table: Table) -> ClauseElement:
    return insert(table).values({column.name: bindparam(column.name) for column in table.columns})


class Queries:
    """The statements of one backend, compiled for its driver."""

    def __init__(self, backend: Backend, dialect: Dialect) -> None:
        self.backend: Backend = backend
        pg = backend == "postgresql"

        def among(column: Any, name: str) -> ColumnElement[bool]:
            return among_ids(backend, column, name)

        def driver(statement: ClauseElement) -> DriverSql:
            return compile_for(statement, dialect)

        def kind(number: int) -> Any:
            return literal_column(str(number))

        # -- writes of a batch ---------------------------------------------------------------
        locked: Any = select(streams.c.stream_id, streams.c.last_sequence).where(
            among(streams.c.stream_id, "streams")
        )
        if pg:
            locked = locked.order_by(streams.c.stream_id).with_for_update()
        locked = locked.cte("locked")
        self.check = driver(
            union_all(
                select(kind(CHECK_EXISTING_SESSION), sessions.c.session_id, kind(0)).where(
                    among(sessions.c.session_id, "sessions")
                ),
                select(kind(CHECK_EXISTING_KEY), sessions.c.idempotency_key, kind(0)).where(
                    among(sessions.c.idempotency_key, "keys")
                ),
                select(
                    kind(CHECK_NEXT_MESSAGE),
                    messages.c.session_id,
                    func.max(messages.c.idx) + literal_column("1"),
                )
                .where(among(messages.c.session_id, "messages"))
                .group_by(messages.c.session_id),
                select(kind(CHECK_LAST_SEQUENCE), locked.c.stream_id, locked.c.last_sequence),
            )
        )
        """Everything a group's rules depend on, in one round trip: sessions and keys that exist,
        each session's next message index, each stream's last sequence (locked on PostgreSQL)."""
        self.insert_sessions = driver(_insert(sessions))
        self.update_sessions = driver(
            update(sessions)
            .where(sessions.c.session_id == bindparam("b_session_id"))
            .values({name: bindparam(name) for name in UPDATED_COLUMNS})
        )
        self.clear_messages = driver(delete(messages).where(among(messages.c.session_id, "ids")))
        refs_c = sub_session_refs.c
        self.delete_sessions = tuple(
            driver(statement)
            for statement in (
                delete(sessions).where(among(sessions.c.session_id, "ids")),
                delete(messages).where(among(messages.c.session_id, "ids")),
                delete(sub_session_refs).where(
                    among(refs_c.parent_session_id, "ids") | among(refs_c.sub_session_id, "ids")
                ),
                delete(interrupt_flags).where(among(interrupt_flags.c.session_id, "ids")),
                delete(inbox).where(among(inbox.c.session_id, "ids")),
                delete(background_queue).where(among(background_queue.c.session_id, "ids")),
            )
        )
        """What deleting sessions takes (see `WriteBatch.deleted_sessions`), one table each."""
        self.insert_messages = driver(_insert(messages))
        self.upsert_refs = driver(
            upsert(
                sub_session_refs,
                ("parent_session_id", "sub_session_id"),
                position="(SELECT COALESCE(MAX(position), 0) + 1 FROM sub_session_refs "
                "WHERE parent_session_id = CAST(:parent_session_id AS VARCHAR))",
            )
        )
        self.advance_streams = driver(
            text(
                "INSERT INTO streams (stream_id, last_sequence, status) "
                "VALUES (:stream_id, :last_sequence, 'running') "
                "ON CONFLICT (stream_id) DO UPDATE SET last_sequence = excluded.last_sequence"
            )
        )
        self.insert_chunks = driver(_insert(chunks))
        self.queue_inbox = driver(
            insert(inbox).values(
                session_id=bindparam("session_id"),
                content=bindparam("content"),
                created_at=bindparam("created_at"),
            )
        )
        self.take_inbox = driver(
            delete(inbox)
            .where(inbox.c.session_id == bindparam("session_id"))
            .where(inbox.c.id <= bindparam("through"))
        )
        self.upsert_stream_status = driver(upsert(streams, ("stream_id",), last_sequence="0"))
        self._dialect = dialect
        self._writes: dict[tuple[frozenset[str], frozenset[str]], DriverSql] = {}
        self.notify = driver(
            text(
                "SELECT pg_notify(:channel, payload) FROM unnest(:payloads) AS payload"
            ).bindparams(
                bindparam("channel", type_=String), bindparam("payloads", type_=ARRAY(String))
            )
        )

        # -- reads ---------------------------------------------------------------------------
        self.get_session = driver(
            select(sessions).where(sessions.c.session_id == bindparam("session_id"))
        )
        self.owners = driver(
            select(sessions.c.session_id, sessions.c.owner_id).where(
                among(sessions.c.session_id, "ids")
            )
        )
        """Who holds the lease of each session (for `WriteBatch.fence`)."""
        self.session_by_key = driver(
            select(sessions).where(sessions.c.idempotency_key == bindparam("key"))
        )
        self.load_messages = driver(
            select(messages.c.body)
            .where(messages.c.session_id == bindparam("session_id"))
            .order_by(messages.c.idx)
        )
        refs = sub_session_refs.c
        self.get_refs = driver(
            select(sub_session_refs)
            .where(refs.parent_session_id == bindparam("parent_session_id"))
            .order_by(refs.position)
        )
        self.read_inbox = driver(
            select(inbox.c.id, inbox.c.content, inbox.c.created_at)
            .where(inbox.c.session_id == bindparam("session_id"))
            .order_by(inbox.c.id)
        )
        self.read_chunks = driver(
            select(chunks.c.body)
            .where(chunks.c.stream_id == bindparam("stream_id"))
            .where(chunks.c.sequence > bindparam("after"))
            .order_by(chunks.c.sequence)
            .limit(bindparam("limit"))
            .offset(literal_column("0"))
        )
        page = (
            select(chunks.c.sequence, chunks.c.body)
            .where(chunks.c.stream_id == bindparam("stream_id"))
            .where(chunks.c.sequence > bindparam("after"))
            .order_by(chunks.c.sequence)
            .limit(bindparam("limit"))
            .offset(literal_column("0"))
            .subquery()
        )
        self.read_page = driver(
            union_all(
                select(page.c.sequence, page.c.body, literal_column("NULL")),
                select(literal_column("NULL"), streams.c.status, streams.c.last_sequence).where(
                    streams.c.stream_id == bindparam("stream_id")
                ),
            ).order_by(literal_column("1"))
        )
        """A page of stored chunks `(sequence, body, NULL)` and the stream's progress
        `(NULL, status, last_sequence)`, in one statement so they are read in one snapshot."""
        self.get_stream = driver(
            select(streams.c.last_sequence, streams.c.status).where(
                streams.c.stream_id == bindparam("stream_id")
            )
        )
        self.streams_progress = driver(
            select(streams.c.stream_id, streams.c.last_sequence, streams.c.status).where(
                among(streams.c.stream_id, "ids")
            )
        )

        # -- leases --------------------------------------------------------------------------
        now: BindParameter[int] = bindparam("now")
        self.claim = driver(
            update(sessions)
            .where(sessions.c.session_id == bindparam("b_session_id"))
            .where(
                (sessions.c.owner_id.is_(None))
                | (sessions.c.owner_id == bindparam("b_owner_id"))
                | (func.coalesce(sessions.c.lease_expires_at, literal_column("0")) < now)
            )
            .values(owner_id=bindparam("b_owner_id"), lease_expires_at=bindparam("expires"))
        )
        ours = sessions.c.owner_id == bindparam("b_owner_id")
        # A renewal of many sessions must not wait for one while holding others: a group commit
        # may hold that one and wait for them (PostgreSQL then aborts one of the two after a
        # second). So `renew_unheld` takes only the rows no one holds, and `renew_one` each of
        # the rest: one session a statement, which may wait, holding nothing.
        self.renew_one = driver(
            update(sessions)
            .where(sessions.c.session_id == bindparam("b_session_id"))
            .where(ours)
            .values(lease_expires_at=bindparam("expires"))
            .returning(sessions.c.session_id)
        )
        unheld = (
            select(sessions.c.session_id)
            .where(among(sessions.c.session_id, "ids"))
            .where(ours)
            .with_for_update(key_share=True, skip_locked=True)
        )
        self.renew_unheld = driver(
            update(sessions)
            .where(sessions.c.session_id.in_(unheld.scalar_subquery()))
            .values(lease_expires_at=bindparam("expires"))
            .returning(sessions.c.session_id)
        )
        self.release = driver(
            update(sessions)
            .where(sessions.c.session_id == bindparam("b_session_id"))
            .where(sessions.c.owner_id == bindparam("b_owner_id"))
            .values(owner_id=literal_column("NULL"), lease_expires_at=literal_column("NULL"))
        )
        # From the running sessions (few, by the status index) to their roots, by key: a
        # session queued for a background slot is work to take over too.
        running_trees = select(sessions.c.stream_id).where(
            sessions.c.status.in_([literal_column("'running'"), literal_column("'queued'")])
        )
        self.orphaned = driver(
            select(sessions)
            .where(sessions.c.session_id.in_(running_trees))
            .where(
                (sessions.c.owner_id.is_(None))
                | (func.coalesce(sessions.c.lease_expires_at, literal_column("0")) < now)
                | (sessions.c.owner_id == bindparam("b_owner_id"))
            )
            .order_by(sessions.c.created_at, sessions.c.session_id)
        )

        # -- interrupts ----------------------------------------------------------------------
        self.set_flag = driver(upsert(interrupt_flags, ("session_id",)))
        self.take_flag = driver(
            delete(interrupt_flags)
            .where(interrupt_flags.c.session_id == bindparam("session_id"))
            .returning(interrupt_flags.c.reason, interrupt_flags.c.requested_at)
        )
        flags = interrupt_flags.c
        self.all_flags = driver(select(flags.session_id, flags.requested_at))

        # -- retention -----------------------------------------------------------------------
        # `purge_stopped` deletes the chunks of streams stopped before `cutoff` (its count is
        # theirs) and those streams' `stopped_at` is cleared, so a cleanup visits the streams
        # stopped since the last one, not every stream that ever stopped. On SQLite,
        # `forget_stopped` clears them, in the transaction (holding the write lock) that purges.
        stopped = streams.c.stopped_at < bindparam("cutoff")
        self.purge_stopped: DriverSql
        self.forget_stopped: DriverSql | None = None
        if pg:
            # One statement: exactly the streams it marks lose their chunks. Those go by an id
            # array: joined to the streams, which the planner takes for many, the chunks would
            # be scanned whole.
            self.purge_stopped = driver(
                text(
                    "WITH purged AS (UPDATE streams SET stopped_at = NULL "
                    "WHERE stopped_at < :cutoff RETURNING stream_id) "
                    "DELETE FROM chunks WHERE stream_id = ANY(ARRAY(SELECT stream_id FROM purged))"
                ).bindparams(bindparam("cutoff", type_=BigInteger))
            )
        else:
            self.purge_stopped = driver(
                delete(chunks).where(
                    chunks.c.stream_id.in_(select(streams.c.stream_id).where(stopped))
                )
            )
            self.forget_stopped = driver(update(streams).where(stopped).values(stopped_at=null()))

    def write_all(self, parts: frozenset[str], guard: frozenset[str]) -> DriverSql:
        """PostgreSQL: the one statement writing a group's `parts`, guarded by the `guard`
        checks (see `pg_write`)."""
        key = (parts, guard)
        statement = self._writes.get(key)
        if statement is None:
            built = build_write_all(parts, guard)
            statement = self._writes[key] = compile_for(built, self._dialect)
        return statement

    def ids(self, values: Iterable[str | None]) -> list[str] | str:
        """An id list as the parameter of an `among` condition takes it."""
        listed = [value for value in values if value is not None]
        return listed if self.backend == "postgresql" else json.dumps(listed)


@functools.cache
def queries_for(backend: Backend) -> Queries:
    """The statements of `backend`, compiled once per process (compiling takes ~40 ms)."""
    return Queries(backend, dialect_for(backend))
