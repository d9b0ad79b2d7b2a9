"""PostgreSQL: a lease renewal never waits for one session's row while holding another's, so it
cannot deadlock with a group commit (PostgreSQL would abort one of them after `deadlock_timeout`,
1 s). Group commits of different write lanes touch different sessions."""

from __future__ import annotations

import asyncio

import asyncpg  # type: ignore[import-untyped]
import pytest
from sqlalchemy.engine import make_url

from app.store import now_ms
from app.store.sql import SqlStore
from tests.store.test_contract import create, session

pytestmark = pytest.mark.postgres


async def _until_a_backend_waits_for_a_lock(connection: asyncpg.Connection) -> None:
    for _ in range(1000):
        waiting = await connection.fetchval(
            """SELECT count(*) FROM pg_stat_activity
            WHERE datname = current_database() AND wait_event_type = 'Lock'"""
        )
        if waiting:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("no statement waited for a lock")


async def test_a_lease_renewal_waits_for_a_step_commit_without_deadlocking_it(
    postgres_url: str,
) -> None:
    """A step commit holding session "b" and then updating "a" (as a group commit of several
    sessions does) must not meet a renewal that holds "a" and waits for "b"."""
    dsn = make_url(postgres_url).set(drivername="postgresql").render_as_string(False)
    async with SqlStore(postgres_url) as store:
        soon = now_ms() + 1_000
        await create(
            store,
            session("a", owner_id="one", lease_expires_at=soon),
            session("b", owner_id="one", lease_expires_at=soon),
        )
        commit, watcher = await asyncpg.connect(dsn), await asyncpg.connect(dsn)
        try:
            step = commit.transaction()
            await step.start()
            await commit.execute("UPDATE sessions SET step_count = 1 WHERE session_id = 'b'")
            renewal = asyncio.ensure_future(store.renew_leases("one", ["a", "b"], 60_000))
            await _until_a_backend_waits_for_a_lock(watcher)
            await commit.execute("UPDATE sessions SET step_count = 1 WHERE session_id = 'a'")
            await step.commit()
            assert await renewal == {"a", "b"}
        finally:
            await commit.close()
            await watcher.close()
        for session_id in ("a", "b"):
            record = await store.get_session(session_id)
            assert record.step_count == 1
            assert record.lease_expires_at is not None
            assert record.lease_expires_at > soon
