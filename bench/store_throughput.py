"""Store throughput: chunks/s into one stream and into 50, and what a runtime step's commit costs.

Usage: `.venv/bin/python bench/store_throughput.py --backend sqlite|postgres [--url URL]`.
Without `--url`, SQLite uses a temporary file and PostgreSQL a temporary database created on the
server of `TEST_POSTGRES_URL` (default postgresql+asyncpg://postgres@127.0.0.1:5432/test) and
dropped afterwards. Figures:

- one stream: chunks/s written by one writer committing `--batch` chunks at a time and awaiting
  each commit, then read back 1,000 at a time; then with up to 4 commits in flight, as the
  runtime's timed flushes issue them (the store commits them in call order, grouped);
- 50 streams: the same with 50 concurrent writers (group commit merges their batches), then
  50 concurrent readers;
- step commits: `--runs` concurrent runs, each committing steps shaped like a runtime step (a
  session update, 2 messages, 1 sub-session ref, 5 chunks): the median and p95 latency of one
  commit, and the process CPU per commit (this process only: PostgreSQL's own CPU is not in it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy.engine import make_url

from app.protocol import AssistantMessage, SubSessionRef, TextDeltaChunk, ToolMessage
from app.store import (
    ChunkAppend,
    MessageAppend,
    RefUpsert,
    SessionRecord,
    WriteBatch,
    now_ms,
)
from app.store.sql import SqlStore

POSTGRES_URL = os.environ.get(
    "TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)


@contextlib.asynccontextmanager
async def temporary_database(backend: str) -> AsyncIterator[str]:
    """A fresh database for one run, removed afterwards."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as folder:
            yield f"sqlite+aiosqlite:///{folder}/bench.db"
        return
    name = f"store_bench_{uuid.uuid4().hex[:12]}"
    admin_dsn = make_url(POSTGRES_URL).set(drivername="postgresql")
    admin = await asyncpg.connect(admin_dsn.render_as_string(hide_password=False))
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def delta(stream_id: str, sequence: int) -> TextDeltaChunk:
    """A text delta the size of a typical streamed token group."""
    return TextDeltaChunk(
        sequence=sequence,
        agent_id=stream_id,
        agent_type="bench",
        step=1,
        timestamp=now_ms(),
        delta="lorem ipsum dolor ",
    )


async def write_stream(
    store: SqlStore, stream_id: str, chunks: int, batch: int, *, in_flight: int = 1
) -> None:
    """Commit `chunks` chunks into one stream, `batch` per commit, with up to `in_flight`
    commits outstanding (the store applies them in call order, as the runtime's timed flushes
    rely on)."""
    pending: set[asyncio.Task[None]] = set()
    for start in range(1, chunks + 1, batch):
        end = min(start + batch, chunks + 1)
        appended = [delta(stream_id, sequence) for sequence in range(start, end)]
        commit = store.commit(WriteBatch(chunks=[ChunkAppend(stream_id, appended)]))
        if in_flight == 1:
            await commit
            continue
        pending.add(asyncio.create_task(commit))
        if len(pending) >= in_flight:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()
    for task in pending:
        await task


async def read_stream(store: SqlStore, stream_id: str) -> int:
    """Read the whole stream back, 1,000 chunks at a time."""
    after = 0
    while page := await store.read_chunks(stream_id, after=after, limit=1000):
        after = page[-1].sequence
    return after


async def streams_throughput(
    store: SqlStore, streams: int, chunks: int, batch: int, tag: str, *, in_flight: int = 1
) -> tuple[float, float]:
    """Chunks/s written and read back with `streams` concurrent streams."""
    ids = [f"{tag}-{uuid.uuid4().hex[:8]}-{i}" for i in range(streams)]
    started = time.perf_counter()
    await asyncio.gather(
        *(write_stream(store, id_, chunks, batch, in_flight=in_flight) for id_ in ids)
    )
    written = streams * chunks / (time.perf_counter() - started)
    started = time.perf_counter()
    counts = await asyncio.gather(*(read_stream(store, stream_id) for stream_id in ids))
    assert counts == [chunks] * streams, counts
    read = streams * chunks / (time.perf_counter() - started)
    return written, read


@dataclasses.dataclass
class StepFigures:
    """What the step benchmark measured."""

    median_ms: float
    p95_ms: float
    cpu_ms_per_commit: float
    commits: int
    transactions: int


def step_batches(session_id: str, steps: int) -> list[WriteBatch]:
    """A run's batches: its creation, then `steps` runtime-shaped steps."""
    record = SessionRecord(
        session_id=session_id,
        agent_type="bench",
        stream_id=session_id,
        status="running",
        created_at=now_ms(),
        updated_at=now_ms(),
        state={"notes": ["a", "b"], "count": 0},
        input={"message": "hello"},
    )
    batches = [WriteBatch(new_sessions=[record])]
    sequence = 0
    for step in range(steps):
        record = dataclasses.replace(
            record, step_count=step + 1, updated_at=now_ms(), state={"count": step}
        )
        appended = []
        for _ in range(5):
            sequence += 1
            appended.append(delta(session_id, sequence))
        tool_message = ToolMessage(tool_call_id=f"c{step}", tool_name="search", result=[1, 2])
        ref = SubSessionRef(
            sub_session_id=f"{session_id}-sub-c{step}",
            agent_type="child",
            parent_tool_call_id=f"c{step}",
            status="completed",
            started_at=now_ms(),
        )
        batches.append(
            WriteBatch(
                updated_sessions=[record],
                messages=[
                    MessageAppend(session_id, 2 * step, AssistantMessage(content="thinking")),
                    MessageAppend(session_id, 2 * step + 1, tool_message),
                ],
                refs=[RefUpsert(session_id, ref)],
                chunks=[ChunkAppend(session_id, appended)],
            )
        )
    return batches


async def step_commits(store: SqlStore, runs: int, steps: int) -> StepFigures:
    """`runs` concurrent runs committing `steps` runtime-shaped steps each.

    The batches are built before the clock starts, so the CPU figure is the store's alone.
    """
    latencies: list[float] = []
    prefix = uuid.uuid4().hex[:8]
    plans = [step_batches(f"run-{prefix}-{index}", steps) for index in range(runs)]

    async def run(batches: list[WriteBatch]) -> None:
        await store.commit(batches[0])
        for batch in batches[1:]:
            started = time.perf_counter()
            await store.commit(batch)
            latencies.append(time.perf_counter() - started)

    groups_before = store.commit_groups
    cpu_before = time.process_time()
    await asyncio.gather(*(run(batches) for batches in plans))
    cpu = time.process_time() - cpu_before
    commits = runs * (steps + 1)
    latencies.sort()
    return StepFigures(
        median_ms=statistics.median(latencies) * 1000,
        p95_ms=latencies[int(len(latencies) * 0.95)] * 1000,
        cpu_ms_per_commit=cpu / commits * 1000,
        commits=commits,
        transactions=store.commit_groups - groups_before,
    )


async def main() -> None:
    """Run every figure once and print it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--url", help="an existing database to use instead of a temporary one")
    parser.add_argument("--chunks", type=int, default=20_000, help="chunks into the one stream")
    parser.add_argument("--batch", type=int, default=100, help="chunks per commit")
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--runs", type=int, default=100, help="concurrent runs for step commits")
    parser.add_argument("--steps", type=int, default=20, help="steps per run")
    args = parser.parse_args()

    async with contextlib.AsyncExitStack() as stack:
        url = args.url or await stack.enter_async_context(temporary_database(args.backend))
        store = await stack.enter_async_context(SqlStore(url))
        print(f"backend: {args.backend} ({store.backend})")

        written, read = await streams_throughput(store, 1, args.chunks, args.batch, "one")
        print(f"one stream:   {written:>9,.0f} chunks/s written   {read:>9,.0f} chunks/s read")
        written, _ = await streams_throughput(
            store, 1, args.chunks, args.batch, "pipelined", in_flight=4
        )
        print(f"one stream, 4 commits in flight: {written:>9,.0f} chunks/s written")

        per_stream = max(args.chunks // args.streams, args.batch)
        written, read = await streams_throughput(
            store, args.streams, per_stream, args.batch, "many"
        )
        print(
            f"{args.streams} streams:   {written:>9,.0f} chunks/s written   "
            f"{read:>9,.0f} chunks/s read"
        )

        single = await step_commits(store, 1, args.steps * 5)
        print(
            f"step commit, 1 run:      median {single.median_ms:.2f} ms   "
            f"p95 {single.p95_ms:.2f} ms   CPU {single.cpu_ms_per_commit:.3f} ms/commit"
        )
        many = await step_commits(store, args.runs, args.steps)
        print(
            f"step commit, {args.runs} runs:   median {many.median_ms:.2f} ms   "
            f"p95 {many.p95_ms:.2f} ms   CPU {many.cpu_ms_per_commit:.3f} ms/commit   "
            f"({many.commits / many.transactions:.1f} commits per transaction)"
        )


if __name__ == "__main__":
    asyncio.run(main())
