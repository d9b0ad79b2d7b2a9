"""PostgreSQL: a whole group's writes as one statement, so a group costs one round trip.

Each table's rows travel as one JSON parameter, unpacked by `json_to_recordset` (one text value
to encode, where an array per column cost the driver a type check per element), each table's
write is a data-modifying CTE, and the main query sends the notifications. Guarded, a first CTE
checks what the group expects of the database and every write depends on it, so the statement
writes all or nothing by itself. The CTEs share one snapshot and must not touch a row twice, so
the plan handed to it is net: a session created and updated in one group is inserted once, refs
appear once, a stream appears once (in the status part when its status changes), and cleared
conversations are a statement of their own, before it.
"""

from __future__ import annotations

from sqlalchemy import Table, TextClause, bindparam, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.types import JSON

from app.store.sql.rows import SESSION_COLUMNS, UPDATED_COLUMNS
from app.store.sql.tables import chunks, messages, sessions, streams, sub_session_refs

REF_COLUMNS = tuple(column.name for column in sub_session_refs.columns if column.name != "position")
"""The refs' columns the rows carry (the statement computes `position`)."""

WRITE_COLUMNS: dict[str, tuple[str, ...]] = {
    "n_": SESSION_COLUMNS,
    "u_": ("session_id", *UPDATED_COLUMNS),
    "m_": tuple(column.name for column in messages.columns),
    "r_": REF_COLUMNS,
    "c_": tuple(column.name for column in chunks.columns),
    "a_": ("stream_id", "last_sequence"),
    "s_": ("stream_id", "last_sequence", "status", "stopped_at"),
}
"""Each part's parameter prefix and the row keys it takes."""

_DIALECT = postgresql.dialect()  # type: ignore[no-untyped-call]


def _q(name: str) -> str:
    return f'"{name}"'


def _rows(prefix: str, table: Table, names: tuple[str, ...], alias: str = "v") -> str:
    """The part's rows: its JSON parameter as a record set `v`. JSON columns arrive as JSON
    text (what the row builders make) and are cast where they are written."""
    columns = ", ".join(
        f"{_q(name)} "
        + (
            "text"
            if isinstance(table.columns[name].type, JSON)
            else table.columns[name].type.compile(dialect=_DIALECT)
        )
        for name in names
    )
    return f"json_to_recordset(CAST(:{prefix}rows AS json)) AS {alias}({columns})"


def _value(table: Table, name: str) -> str:
    cast = "::jsonb" if isinstance(table.columns[name].type, JSON) else ""
    return f"v.{_q(name)}{cast}"


PARTS = ("n_", "u_", "l_", "m_", "r_", "c_", "a_", "s_")
"""The statement's parts, by parameter prefix: new and updated sessions, leases given up,
messages, refs, chunks, streams that only advanced, streams whose status changed (and maybe
advanced)."""

GUARD_CHECKS = {
    "g_new": """NOT EXISTS (SELECT 1 FROM unnest(:g_new) AS id
        WHERE (SELECT true FROM sessions WHERE session_id = id))""",
    "g_keys": """NOT EXISTS (SELECT 1 FROM unnest(:g_keys) AS k
        WHERE (SELECT true FROM sessions WHERE idempotency_key = k))""",
    "g_updated": """NOT EXISTS (SELECT 1 FROM unnest(:g_updated) AS id
        WHERE (SELECT true FROM sessions WHERE session_id = id) IS NULL)""",
    "g_messages": """NOT EXISTS (
        SELECT 1 FROM json_to_recordset(CAST(:g_messages AS json)) AS e(session_id text, idx int)
        WHERE e.idx <> COALESCE(
            (SELECT MAX(m.idx) + 1 FROM messages AS m WHERE m.session_id = e.session_id), 0))""",
    "g_streams": """NOT EXISTS (
        SELECT 1 FROM json_to_recordset(CAST(:g_streams AS json)) AS e(stream_id text, last bigint)
        WHERE e.last <> COALESCE(
            (SELECT s.last_sequence FROM streams AS s WHERE s.stream_id = e.stream_id), 0))""",
    "g_owners": """NOT EXISTS (
        SELECT 1 FROM json_to_recordset(CAST(:g_owners AS json))
            AS e(session_id text, owner_id text)
        WHERE (SELECT s.owner_id FROM sessions AS s WHERE s.session_id = e.session_id)
            IS DISTINCT FROM e.owner_id)""",
}
"""What a group may expect of the database, by parameter: its new sessions and keys absent, the
sessions it updates present, each conversation and stream continuing where the group's first
message and chunk say, and the leases it is fenced by held by their owners. A group's guard
checks those it has (a check of nothing still costs the database a plan node), and every write
below happens only if they hold.

Each check probes the tables once per id, through a scalar subquery the planner cannot turn
into a join: a join against a JSON record set or an array parameter is planned for 100 rows, so
up to tens of thousands of sessions the planner prefers to scan the whole table."""

GUARD_ARRAYS = ("g_new", "g_keys", "g_updated")
"""The checks whose parameter is an id array (the others' is a JSON array of objects)."""


def build_write_all(parts: frozenset[str], guard: frozenset[str] = frozenset()) -> TextClause:
    """The statement writing `parts`; parameters are `<prefix>rows` (a JSON array of row
    objects), `channel` and `payloads` (the notifications), and the `guard` checks' parameters
    (see `GUARD_CHECKS`). It returns one row: whether it wrote (always, with no guard). Parts a
    group does not need are left out."""
    guarded = bool(guard)
    when = "(SELECT ok FROM guard)" if guarded else "true"

    def listed(names: tuple[str, ...]) -> str:
        return ", ".join(_q(name) for name in names)

    def values(table: Table, names: tuple[str, ...]) -> str:
        return ", ".join(_value(table, name) for name in names)

    checks = "\n    AND ".join(GUARD_CHECKS[name] for name in sorted(guard))
    ctes: list[str] = [f"guard AS (SELECT\n    {checks}\n    AS ok)"] if guarded else []
    if "n_" in parts:
        names = WRITE_COLUMNS["n_"]
        ctes.append(f"""new_sessions AS (
    INSERT INTO sessions ({listed(names)})
    SELECT {values(sessions, names)} FROM {_rows("n_", sessions, names)} WHERE {when})""")
    if "u_" in parts:
        names = WRITE_COLUMNS["u_"]
        assigned = ", ".join(f"{_q(n)} = {_value(sessions, n)}" for n in UPDATED_COLUMNS)
        # A lease given up by the write is cleared here for a session it updates (a statement's
        # writes must not touch a row twice), below for the others.
        released = (
            ""
            if "l_" not in parts
            else """,
        "owner_id" = CASE WHEN v.session_id = ANY(:l_ids) THEN NULL ELSE sessions.owner_id END,
        "lease_expires_at" = CASE WHEN v.session_id = ANY(:l_ids) THEN NULL
            ELSE sessions.lease_expires_at END"""
        )
        # The ids as an array make the sessions an index scan: joined to the record set
        # alone, they would be a scan of the whole table (see GUARD_CHECKS).
        ctes.append(f"""updated_rows AS MATERIALIZED (SELECT * FROM {_rows("u_", sessions, names)}),
    updated_sessions AS (
    UPDATE sessions SET {assigned}{released}
    FROM updated_rows AS v
    WHERE sessions.session_id = v.session_id AND {when}
        AND sessions.session_id = ANY(ARRAY(SELECT session_id FROM updated_rows)))""")
    if "l_" in parts:
        others = (
            "AND NOT sessions.session_id = ANY(ARRAY(SELECT session_id FROM updated_rows))"
            if "u_" in parts
            else ""
        )
        ctes.append(f"""released_leases AS (
    UPDATE sessions SET "owner_id" = NULL, "lease_expires_at" = NULL
    WHERE sessions.session_id = ANY(:l_ids) {others} AND {when})""")
    if "m_" in parts:
        names = WRITE_COLUMNS["m_"]
        ctes.append(f"""new_messages AS (
    INSERT INTO messages ({listed(names)})
    SELECT {values(messages, names)} FROM {_rows("m_", messages, names)} WHERE {when})""")
    if "r_" in parts:
        rest = tuple(name for name in REF_COLUMNS if name != "parent_session_id")
        updated = ", ".join(f"{_q(n)} = excluded.{_q(n)}" for n in rest if n != "sub_session_id")
        ctes.append(f"""upserted_refs AS (
    INSERT INTO sub_session_refs ("parent_session_id", "position", {listed(rest)})
    SELECT v.parent_session_id,
        COALESCE((SELECT MAX(r.position) FROM sub_session_refs AS r
                  WHERE r.parent_session_id = v.parent_session_id), 0) + v.ordinal,
        {values(sub_session_refs, rest)}
    FROM ROWS FROM ({_rows("r_", sub_session_refs, REF_COLUMNS, alias="")})
        WITH ORDINALITY AS v({listed(REF_COLUMNS)}, ordinal)
    WHERE {when}
    ON CONFLICT (parent_session_id, sub_session_id) DO UPDATE SET {updated})""")
    if "c_" in parts:
        names = WRITE_COLUMNS["c_"]
        ctes.append(f"""new_chunks AS (
    INSERT INTO chunks ({listed(names)})
    SELECT {values(chunks, names)} FROM {_rows("c_", chunks, names)} WHERE {when})""")
    if "a_" in parts:
        ctes.append(f"""advanced_streams AS (
    INSERT INTO streams ("stream_id", "last_sequence", "status")
    SELECT v.stream_id, v.last_sequence, 'running'
    FROM {_rows("a_", streams, WRITE_COLUMNS["a_"])} WHERE {when}
    ON CONFLICT (stream_id) DO UPDATE SET last_sequence = excluded.last_sequence)""")
    if "s_" in parts:
        # A status row may also advance the stream (a run's last chunks and its end); one that
        # does not carries no sequence, and sequences only grow.
        ctes.append(f"""stream_statuses AS (
    INSERT INTO streams ("stream_id", "last_sequence", "status", "stopped_at")
    SELECT v.stream_id, COALESCE(v.last_sequence, 0), v.status, v.stopped_at
    FROM {_rows("s_", streams, WRITE_COLUMNS["s_"])} WHERE {when}
    ON CONFLICT (stream_id) DO UPDATE SET
        last_sequence = GREATEST(streams.last_sequence, excluded.last_sequence),
        status = excluded.status, stopped_at = excluded.stopped_at)""")
    notify = (
        f"SELECT {when} AS wrote, (SELECT count(pg_notify(:channel, payload)) "
        f"FROM unnest(:payloads) AS payload WHERE {when}) AS notified"
    )
    text_type = streams.c.stream_id.type
    binds = [
        bindparam(prefix + "rows", type_=text_type) for prefix in sorted(parts) if prefix != "l_"
    ]
    if "l_" in parts:
        binds.append(bindparam("l_ids", type_=postgresql.ARRAY(text_type)))
    binds.append(bindparam("channel", type_=text_type))
    binds.append(bindparam("payloads", type_=postgresql.ARRAY(text_type)))
    for name in sorted(guard):
        array = name in GUARD_ARRAYS
        binds.append(bindparam(name, type_=postgresql.ARRAY(text_type) if array else text_type))
    sql = f"WITH {', '.join(ctes)} {notify}" if ctes else notify
    return text(sql).bindparams(*binds)
