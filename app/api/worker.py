"""What one server process holds while it serves: its name in session leases, and the
per-process state of metrics and traces.

`SERVER_ID` names a server so that, restarted, it resumes its own sessions at once. Several
worker processes (`WEB_CONCURRENCY`) started with the same `SERVER_ID` must not share that
name: each would take the others' sessions for its own. So each process claims a slot, an
exclusive lock on a file named after the server id and the database (`flock`, released by the
kernel when the process ends, however it ends): the first is `SERVER_ID` itself, the others
`SERVER_ID.1`, `SERVER_ID.2`, ... A worker that restarts finds its slot free again, under the
same name. Without `SERVER_ID` every process gets a random name, as scaled replicas should.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import os
import tempfile
from types import TracebackType
from typing import IO

from app.observability import metrics, tracing

MAX_SLOTS = 256


class Worker:
    """This process as a server: its lease owner id (`owner_id`) while the block runs."""

    def __init__(self, server_id: str | None, database_url: str) -> None:
        self._lock: IO[bytes] | None = None
        self.owner_id = server_id
        """The name this process holds leases under (None: the runtime picks a random one)."""
        if server_id is not None:
            self.owner_id, self._lock = _claim_slot(server_id, database_url)

    async def __aenter__(self) -> Worker:
        metrics.worker_started()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if tracing.tracer is not None:
            await asyncio.to_thread(tracing.flush)  # bounded; a blocking export, off the loop
        self.close()

    def close(self) -> None:
        """Drop this process's live gauges and give up the slot."""
        metrics.worker_stopped()
        if self._lock is not None:
            self._lock.close()
            self._lock = None


def _claim_slot(server_id: str, database_url: str) -> tuple[str, IO[bytes] | None]:
    key = hashlib.sha256(f"{server_id}\0{database_url}".encode()).hexdigest()[:16]
    folder = tempfile.gettempdir()
    for slot in range(MAX_SLOTS):
        path = os.path.join(folder, f"agent-server-{key}.{slot}.lock")
        try:
            lock = open(path, "ab")  # noqa: SIM115 - held until `close`
        except OSError:
            return server_id, None  # no lock file possible: behave as before slots existed
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            continue
        return (server_id if slot == 0 else f"{server_id}.{slot}"), lock
    return f"{server_id}.{os.getpid()}", None
