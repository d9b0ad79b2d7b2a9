"""PostgreSQL: a whole group's writes as one statement, so a step costs one round trip to write.

Each table's rows travel as one array per column (`unnest`), each table's write is a
data-modifying CTE, and the main query sends the notifications. The CTEs share one snapshot and
must not touch a row twice, so the plan handed to it is net: a session created and updated in one
group is inserted once, refs and streams appear once each, and stream statuses (which touch the
streams the sequence upsert touches) and cleared conversations are separate statements.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ARRAY, Column, Table, TextClause, bindparam, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.sql.elements import BindParameter
from sqlalchemy.types import JSON, TypeEngine

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
"""Each part's parameter prefix and the row keys it takes, one array parameter per key."""


def _array_type(column: Column[Any]) -> TypeEngine[Any]:
    element = JSONB() if isinstance(column.type, JSON) else column.type
    return ARRAY(element)


def _q(name: str) -> str:
    return f'"{name}"'


PARTS = ("n_", "u_", "m_", "r_", "c_", "a_")
"""The statement's parts, by parameter prefix: new and updated sessions, messages, refs, chunks,
advanced streams."""


def build_write_all(parts: frozenset[str]) -> TextClause:
    """The statement writing `parts`; parameters are `<prefix><column>` arrays, `channel` and
    `payloads` (the notifications). Parts a group does not need are left out, since encoding
    empty arrays costs CPU too."""
    binds: list[BindParameter[Any]] = []

    def arrays(prefix: str, table: Table, names: tuple[str, ...]) -> str:
        for name in names:
            binds.append(bindparam(prefix + name, type_=_array_type(table.columns[name])))
        return ", ".join(f":{prefix}{name}" for name in names)

    def listed(names: tuple[str, ...]) -> str:
        return ", ".join(_q(name) for name in names)

    ctes: list[str] = []
    if "n_" in parts:
        names = WRITE_COLUMNS["n_"]
        ctes.append(f"""new_sessions AS (
    INSERT INTO sessions ({listed(names)})
    SELECT * FROM unnest({arrays("n_", sessions, names)}))""")
    if "u_" in parts:
        names = WRITE_COLUMNS["u_"]
        ctes.append(f"""updated_sessions AS (
    UPDATE sessions SET {", ".join(f"{_q(n)} = v.{_q(n)}" for n in UPDATED_COLUMNS)},
        "owner_id" = CASE WHEN v.status = 'running' THEN sessions.owner_id END,
        "lease_expires_at" = CASE WHEN v.status = 'running' THEN sessions.lease_expires_at END
    FROM unnest({arrays("u_", sessions, names)}) AS v({listed(names)})
    WHERE sessions.session_id = v.session_id)""")
    if "m_" in parts:
        names = WRITE_COLUMNS["m_"]
        ctes.append(f"""new_messages AS (
    INSERT INTO messages ({listed(names)})
    SELECT * FROM unnest({arrays("m_", messages, names)}))""")
    if "r_" in parts:
        rest = tuple(name for name in REF_COLUMNS if name != "parent_session_id")
        updated = ", ".join(f"{_q(n)} = excluded.{_q(n)}" for n in rest if n != "sub_session_id")
        ctes.append(f"""upserted_refs AS (
    INSERT INTO sub_session_refs ("parent_session_id", "position", {listed(rest)})
    SELECT v.parent_session_id,
        COALESCE((SELECT MAX(r.position) FROM sub_session_refs AS r
                  WHERE r.parent_session_id = v.parent_session_id), 0) + v.ordinal,
        {", ".join(f"v.{_q(n)}" for n in rest)}
    FROM unnest({arrays("r_", sub_session_refs, REF_COLUMNS)})
        WITH ORDINALITY AS v({listed(REF_COLUMNS)}, ordinal)
    ON CONFLICT (parent_session_id, sub_session_id) DO UPDATE SET {updated})""")
    if "c_" in parts:
        names = WRITE_COLUMNS["c_"]
        ctes.append(f"""new_chunks AS (
    INSERT INTO chunks ({listed(names)})
    SELECT * FROM unnest({arrays("c_", chunks, names)}))""")
    if "a_" in parts:
        ctes.append(f"""advanced_streams AS (
    INSERT INTO streams ("stream_id", "last_sequence", "status")
    SELECT v.stream_id, v.last_sequence, 'running'
    FROM unnest({arrays("a_", streams, WRITE_COLUMNS["a_"])}) AS v(stream_id, last_sequence)
    ON CONFLICT (stream_id) DO UPDATE SET last_sequence = excluded.last_sequence)""")
    notify = "SELECT count(pg_notify(:channel, payload)) FROM unnest(:payloads) AS payload"
    binds.append(bindparam("channel", type_=streams.c.stream_id.type))
    binds.append(bindparam("payloads", type_=ARRAY(streams.c.stream_id.type)))
    sql = f"WITH {', '.join(ctes)} {notify}" if ctes else notify
    return text(sql).bindparams(*binds)
