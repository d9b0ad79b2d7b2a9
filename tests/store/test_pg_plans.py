"""PostgreSQL plans the group write to touch only the rows it names, however large the tables."""

from __future__ import annotations

import json

import asyncpg  # type: ignore[import-untyped]
import pytest
from sqlalchemy.dialects.postgresql.asyncpg import dialect as asyncpg_dialect
from sqlalchemy.engine import make_url

from app.store.sql import SqlStore
from app.store.sql.compiling import compile_for
from app.store.sql.pg_write import GUARD_CHECKS, PARTS, build_write_all

pytestmark = pytest.mark.postgres

SESSIONS = 20_000
"""Enough that a scan of the table costs milliseconds, too few for the planner to avoid one when
it plans a join against 100 rows of a record set."""


def _params() -> dict[str, object]:
    ids = ["s-1", "s-2", "s-3"]
    session = {"session_id": "s-1", "status": "running", "state": "{}", "input": "{}"}
    return {
        **{prefix + "rows": json.dumps([session]) for prefix in PARTS if prefix != "l_"},
        "l_ids": ids,
        "channel": "test",
        "payloads": [],
        "g_new": ids,
        "g_keys": ["key"],
        "g_updated": ids,
        "g_messages": json.dumps([{"session_id": "s-1", "idx": 0}]),
        "g_streams": json.dumps([{"stream_id": "s-1", "last": 0}]),
        "g_owners": json.dumps([{"session_id": "s-1", "owner_id": "me"}]),
    }


async def test_the_group_write_never_scans_the_sessions_table(postgres_url: str) -> None:
    async with SqlStore(postgres_url):
        pass
    dsn = make_url(postgres_url).set(drivername="postgresql").render_as_string(False)
    connection = await asyncpg.connect(dsn)
    try:
        await connection.execute(
            """INSERT INTO sessions (session_id, agent_type, stream_id, status, created_at,
                updated_at, step_count, state, input, input_tokens, output_tokens)
            SELECT 'x-' || n, 'agent', 'x-' || n, 'completed', 0, 0, 1, '{}', '{}', 0, 0
            FROM generate_series(1, $1::int) AS n""",
            SESSIONS,
        )
        await connection.execute("ANALYZE")
        statement = compile_for(
            build_write_all(frozenset(PARTS), frozenset(GUARD_CHECKS)), asyncpg_dialect()
        )
        args = statement.args(_params())
        for mode in ("force_custom_plan", "force_generic_plan"):
            await connection.execute(f"SET plan_cache_mode = {mode}")
            plan = "\n".join(
                row[0] for row in await connection.fetch(f"EXPLAIN {statement.sql}", *args)
            )
            assert "Seq Scan on sessions" not in plan, plan
    finally:
        await connection.close()


async def test_retention_never_scans_the_chunks_table_and_visits_a_stream_once(
    postgres_url: str,
) -> None:
    async with SqlStore(postgres_url) as store:
        dsn = make_url(postgres_url).set(drivername="postgresql").render_as_string(False)
        connection = await asyncpg.connect(dsn)
        try:
            await connection.execute(
                """INSERT INTO streams (stream_id, last_sequence, status, stopped_at)
                SELECT 'x-' || n, 20, CASE WHEN n % 2 = 0 THEN 'completed' ELSE 'running' END,
                    CASE WHEN n % 2 = 0 THEN n END
                FROM generate_series(1, $1::int) AS n""",
                SESSIONS,
            )
            await connection.execute(
                """INSERT INTO chunks (stream_id, sequence, body)
                SELECT 'x-' || n, q, '{}' FROM generate_series(1, $1::int) AS n,
                    generate_series(1, 10) AS q""",
                SESSIONS,
            )
            await connection.execute("ANALYZE")
            statement = store._queries.purge_stopped
            for mode in ("force_custom_plan", "force_generic_plan"):
                await connection.execute(f"SET plan_cache_mode = {mode}")
                plan = "\n".join(
                    row[0]
                    for row in await connection.fetch(
                        f"EXPLAIN {statement.sql}", *statement.args({"cutoff": 2**40})
                    )
                )
                assert "Seq Scan on chunks" not in plan, plan

            assert await store.delete_finished_streams(older_than_ms=0) == SESSIONS // 2 * 10
            # Purged streams are no longer candidates: the next cleanup does not visit them.
            assert (
                await connection.fetchval(
                    "SELECT count(*) FROM streams WHERE stopped_at IS NOT NULL"
                )
                == 0
            )
            assert await connection.fetchval("SELECT count(*) FROM chunks") == SESSIONS // 2 * 10
        finally:
            await connection.close()
