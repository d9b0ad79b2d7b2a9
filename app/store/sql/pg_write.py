"""PostgreSQL: a whole group's writes as one statement, so a step costs one round trip to write.

Each table's rows travel as one JSON parameter, unpacked by `json_to_recordset` (one text value
to encode, where an array per column cost the driver a type check per element), each table's
write is a data-modifying CTE, and the main query sends the notifications. The CTEs share one
snapshot and must not touch a row twice, so the plan handed to it is net: a session created and
updated in one group is inserted once, refs and streams appear once each, and stream statuses
(which touch the streams the sequence upsert touches) and cleared conversations are separate
statements.
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


PARTS = ("n_", "u_", "m_", "r_", "c_", "a_")
"""The statement's parts, by parameter prefix: new and updated sessions, messages, refs, chunks,
advanced streams."""


def build_write_all(parts: frozenset[str]) -> TextClause:
    """The statement writing `parts`; parameters are `<prefix>rows` (a JSON array of row
    objects), `channel` and `payloads` (the notifications). Parts a group does not need are left
    out."""

    def listed(names: tuple[str, ...]) -> str:
        return ", ".join(_q(name) for name in names)

    def values(table: Table, names: tuple[str, ...]) -> str:
        return ", ".join(_value(table, name) for name in names)

    ctes: list[str] = []
    if "n_" in parts:
        names = WRITE_COLUMNS["n_"]
        ctes.append(f"""new_sessions AS (
    INSERT INTO sessions ({listed(names)})
    SELECT {values(sessions, names)} FROM {_rows("n_", sessions, names)})""")
    if "u_" in parts:
        names = WRITE_COLUMNS["u_"]
        assigned = ", ".join(f"{_q(n)} = {_value(sessions, n)}" for n in UPDATED_COLUMNS)
        ctes.append(f"""updated_sessions AS (
    UPDATE sessions SET {assigned},
        "owner_id" = CASE WHEN v.status = 'running' THEN sessions.owner_id END,
        "lease_expires_at" = CASE WHEN v.status = 'running' THEN sessions.lease_expires_at END
    FROM {_rows("u_", sessions, names)}
    WHERE sessions.session_id = v.session_id)""")
    if "m_" in parts:
        names = WRITE_COLUMNS["m_"]
        ctes.append(f"""new_messages AS (
    INSERT INTO messages ({listed(names)})
    SELECT {values(messages, names)} FROM {_rows("m_", messages, names)})""")
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
    ON CONFLICT (parent_session_id, sub_session_id) DO UPDATE SET {updated})""")
    if "c_" in parts:
        names = WRITE_COLUMNS["c_"]
        ctes.append(f"""new_chunks AS (
    INSERT INTO chunks ({listed(names)})
    SELECT {values(chunks, names)} FROM {_rows("c_", chunks, names)})""")
    if "a_" in parts:
        ctes.append(f"""advanced_streams AS (
    INSERT INTO streams ("stream_id", "last_sequence", "status")
    SELECT v.stream_id, v.last_sequence, 'running'
    FROM {_rows("a_", streams, WRITE_COLUMNS["a_"])}
    ON CONFLICT (stream_id) DO UPDATE SET last_sequence = excluded.last_sequence)""")
    notify = "SELECT count(pg_notify(:channel, payload)) FROM unnest(:payloads) AS payload"
    binds = [bindparam(prefix + "rows", type_=streams.c.stream_id.type) for prefix in sorted(parts)]
    binds.append(bindparam("channel", type_=streams.c.stream_id.type))
    binds.append(bindparam("payloads", type_=postgresql.ARRAY(streams.c.stream_id.type)))
    sql = f"WITH {', '.join(ctes)} {notify}" if ctes else notify
    return text(sql).bindparams(*binds)
