"""Worker processes started with one SERVER_ID hold leases under names of their own."""

from __future__ import annotations

import uuid

from app.api.worker import Worker


def test_workers_with_one_server_id_get_slots_and_a_freed_slot_is_reused() -> None:
    server_id, url = f"s-{uuid.uuid4().hex[:8]}", "postgresql+asyncpg://db/agents"
    first, second = Worker(server_id, url), Worker(server_id, url)
    elsewhere = Worker(server_id, "postgresql+asyncpg://db/other")
    try:
        assert (first.owner_id, second.owner_id) == (server_id, f"{server_id}.1")
        assert elsewhere.owner_id == server_id  # another database: no conflict
        first.close()
        again = Worker(server_id, url)
        assert again.owner_id == server_id
        again.close()
    finally:
        for worker in (first, second, elsewhere):
            worker.close()


def test_without_a_server_id_the_runtime_names_the_process() -> None:
    worker = Worker(None, "memory://")
    assert worker.owner_id is None
    worker.close()
