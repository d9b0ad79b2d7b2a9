"""Two stores on one database, as two server processes would be: wake-ups and flags cross over."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Awaitable

import asyncpg  # type: ignore[import-untyped]
import pytest
from sqlalchemy.engine import make_url

from app.errors import (
    StoreError,
    StoreUnavailableError,
    StreamNotFoundError,
    WriteConflictError,
)
from app.protocol import TextDeltaChunk
from app.store import (
    ChunkAppend,
    QueueEntry,
    SessionRecord,
    StreamUpdate,
    WriteBatch,
    now_ms,
)
from app.store.records import StreamPage
from app.store.sql import SqlStore

WAKE_LIMIT = 1.0
"""Seconds another instance may take to hear of a commit (NOTIFY: ms; SQLite polls: ~25 ms)."""


def delta(stream_id: str, sequence: int) -> TextDeltaChunk:
    return TextDeltaChunk(
        sequence=sequence, agent_id=stream_id, agent_type="a", step=1, timestamp=1, delta="x"
    )


@pytest.fixture
async def pair(sql_url: str) -> AsyncIterator[tuple[SqlStore, SqlStore]]:
    async with SqlStore(sql_url) as writer, SqlStore(sql_url) as reader:
        yield writer, reader


async def timed(awaitable: Awaitable[object]) -> float:
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.wait_for(awaitable, 10)
    return loop.time() - started


async def test_a_chunk_committed_by_one_instance_wakes_a_watch_in_the_other(
    pair: tuple[SqlStore, SqlStore],
) -> None:
    writer, reader = pair
    await writer.commit(WriteBatch(chunks=[ChunkAppend("s", [delta("s", 1)])]))
    async with reader.watch_stream("s") as watch:
        for sequence in (2, 3, 4):
            assert (await watch.read(after=sequence - 1, limit=10)).chunks == []
            waiter = asyncio.create_task(watch.wait(10))
            await asyncio.sleep(0.05)
            assert not waiter.done()
            await writer.commit(WriteBatch(chunks=[ChunkAppend("s", [delta("s", sequence)])]))
            assert await timed(waiter) < WAKE_LIMIT
        assert [sequence for sequence, _ in (await watch.read(after=0, limit=10)).chunks] == [
            1,
            2,
            3,
            4,
        ]


async def test_one_commit_to_many_streams_wakes_watches_of_each_of_them(
    pair: tuple[SqlStore, SqlStore],
) -> None:
    writer, reader = pair
    # Long ids, so the group's notification is split to stay under PostgreSQL's payload limit.
    ids = [f"stream-{n:03d}-" + "x" * 180 for n in range(60)]
    async with contextlib.AsyncExitStack() as stack:
        watches = [await stack.enter_async_context(reader.watch_stream(i)) for i in ids]
        for watch in watches:
            with contextlib.suppress(StreamNotFoundError):
                await watch.read(after=0, limit=10)
        waiters = [asyncio.create_task(watch.wait(10)) for watch in watches]
        await asyncio.sleep(0.05)
        assert not any(waiter.done() for waiter in waiters)
        await writer.commit(WriteBatch(chunks=[ChunkAppend(i, [delta(i, 1)]) for i in ids]))
        assert await timed(asyncio.gather(*waiters)) < WAKE_LIMIT


async def test_a_commit_between_a_watch_read_and_its_wait_is_not_missed(
    pair: tuple[SqlStore, SqlStore],
) -> None:
    writer, reader = pair
    await writer.commit(WriteBatch(chunks=[ChunkAppend("s", [delta("s", 1)])]))
    async with reader.watch_stream("s") as watch:
        for sequence, pause in ((2, 0.0), (3, 0.05)):
            await watch.read(after=sequence - 1, limit=10)
            await writer.commit(WriteBatch(chunks=[ChunkAppend("s", [delta("s", sequence)])]))
            await asyncio.sleep(pause)  # the notification arrives before or after the wait
            assert await timed(watch.wait(10)) < WAKE_LIMIT
        assert (await watch.read(after=2, limit=10)).last_sequence == 3


async def test_a_status_change_wakes_the_other_instance(pair: tuple[SqlStore, SqlStore]) -> None:
    writer, reader = pair
    await writer.commit(WriteBatch(streams=[StreamUpdate("s", "running")]))
    async with reader.watch_stream("s") as watch:
        assert await watch.read(after=0, limit=10) == StreamPage([], 0, "running")
        waiter = asyncio.create_task(watch.wait(10))
        await asyncio.sleep(0.05)
        assert not waiter.done()
        await writer.commit(WriteBatch(streams=[StreamUpdate("s", "completed")]))
        assert await timed(waiter) < WAKE_LIMIT
        assert await watch.read(after=0, limit=10) == StreamPage([], 0, "completed")


async def test_a_watch_on_a_stream_that_does_not_exist_yet_wakes(
    pair: tuple[SqlStore, SqlStore],
) -> None:
    writer, reader = pair
    async with reader.watch_stream("new") as watch:
        with pytest.raises(StreamNotFoundError):
            await watch.read(after=0, limit=10)
        waiter = asyncio.create_task(watch.wait(10))
        await asyncio.sleep(0.05)
        await writer.commit(WriteBatch(chunks=[ChunkAppend("new", [delta("new", 1)])]))
        assert await timed(waiter) < WAKE_LIMIT
        assert (await watch.read(after=0, limit=10)).last_sequence == 1


async def test_an_interrupt_raised_by_one_instance_reaches_the_others_listener(
    pair: tuple[SqlStore, SqlStore],
) -> None:
    setter, runner = pair
    heard: list[str] = []
    arrived = asyncio.Event()

    def listener(session_id: str) -> None:
        heard.append(session_id)
        arrived.set()

    remove = runner.add_interrupt_listener(listener)
    await asyncio.sleep(0.05)
    await setter.set_interrupt_flag("run-1", "stop")
    assert await timed(arrived.wait()) < WAKE_LIMIT
    assert heard == ["run-1"]
    flag = await runner.check_interrupt_flag("run-1")
    assert flag is not None
    assert (flag.session_id, flag.reason) == ("run-1", "stop")
    assert await setter.check_interrupt_flag("run-1") is None
    remove()


async def test_a_slot_freed_by_one_instance_wakes_the_others_queue_listener(
    postgres_url: str,
) -> None:
    async with SqlStore(postgres_url) as ender, SqlStore(postgres_url) as claimant:
        await ender.commit(
            WriteBatch(
                new_sessions=[SessionRecord(i, "w", i, "queued", 1, 1) for i in ("a", "b")],
                enqueued=[QueueEntry(i, i, i, "queued", 0, None, 1) for i in ("a", "b")],
            )
        )
        assert await ender.claim_queued(1, {"a"}, 1) == ["a"]
        freed = asyncio.Event()
        remove = claimant.add_queue_listener(freed.set)
        await ender.commit(WriteBatch(enqueued=[QueueEntry("a", "a", "a", "queued", 0, None, 1)]))
        await asyncio.sleep(0.1)
        assert not freed.is_set()  # inserting a row frees no slot
        await ender.commit(WriteBatch(dequeued=["a"]))
        assert await timed(freed.wait()) < WAKE_LIMIT
        assert await claimant.claim_queued(1, {"b"}, 2) == ["b"]
        remove()


async def test_every_interrupt_is_seen_exactly_once_across_instances(
    pair: tuple[SqlStore, SqlStore],
) -> None:
    first, second = pair
    sets = 60
    seen: list[str] = []
    done = asyncio.Event()

    async def checker(store: SqlStore) -> None:
        while not done.is_set() or len(seen) < sets:
            for i in range(sets):
                flag = await store.check_interrupt_flag(f"flag-{i}")
                if flag is not None:
                    seen.append(flag.session_id)
            await asyncio.sleep(0)

    checkers = [asyncio.create_task(checker(store)) for store in (first, second) * 3]
    setters = (first, second)
    await asyncio.gather(
        *(setters[i % 2].set_interrupt_flag(f"flag-{i}", f"r{i}") for i in range(sets))
    )
    done.set()
    await asyncio.wait_for(asyncio.gather(*checkers), 60)
    assert sorted(seen) == sorted(f"flag-{i}" for i in range(sets))


async def test_wake_ups_survive_a_lost_listen_connection(postgres_url: str) -> None:
    async with SqlStore(postgres_url) as writer, SqlStore(postgres_url) as reader:
        await terminate_listeners(postgres_url)
        await writer.commit(WriteBatch(streams=[StreamUpdate("s", "running")]))
        # While the reader reconnects it polls, and once back it hears notifications again.
        async with reader.watch_stream("s") as watch:
            for sequence in (1, 2, 3):
                await watch.read(after=sequence - 1, limit=10)
                waiter = asyncio.create_task(watch.wait(10))
                await asyncio.sleep(0.05)
                await writer.commit(WriteBatch(chunks=[ChunkAppend("s", [delta("s", sequence)])]))
                assert await timed(waiter) < WAKE_LIMIT
                await asyncio.sleep(0.3)
        heard = asyncio.Event()
        reader.add_interrupt_listener(lambda _session_id: heard.set())
        await writer.set_interrupt_flag("x")
        assert await timed(heard.wait()) < WAKE_LIMIT
        freed = asyncio.Event()
        reader.add_queue_listener(freed.set)
        await writer.commit(WriteBatch(dequeued=["nobody"]))
        assert await timed(freed.wait()) < WAKE_LIMIT


async def terminate_listeners(sql_url: str) -> None:
    url = make_url(sql_url)
    connection = await asyncpg.connect(url.set(drivername="postgresql").render_as_string(False))
    with contextlib.suppress(asyncpg.PostgresError):
        killed = await connection.fetch(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = $1 AND query LIKE 'LISTEN%'",
            url.database,
        )
        assert killed
    await connection.close()


async def test_dropped_connections_are_store_errors_and_the_store_recovers(
    postgres_url: str,
) -> None:
    async with SqlStore(postgres_url) as store:
        await store.commit(WriteBatch(chunks=[ChunkAppend("s", [delta("s", 1)])]))
        await terminate_connections(postgres_url)
        errors: list[BaseException] = []
        for sequence in range(2, 12):
            try:
                await store.commit(WriteBatch(chunks=[ChunkAppend("s", [delta("s", sequence)])]))
            except StoreError as exc:
                errors.append(exc)
                await store.commit(WriteBatch(chunks=[ChunkAppend("s", [delta("s", sequence)])]))
            assert (await store.get_stream("s")).last_sequence == sequence
        assert all(type(error) is StoreUnavailableError for error in errors)
        assert [c.sequence for c in await store.read_chunks("s")] == list(range(1, 12))


async def terminate_connections(sql_url: str) -> None:
    url = make_url(sql_url)
    connection = await asyncpg.connect(url.set(drivername="postgresql").render_as_string(False))
    try:
        await connection.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = $1 AND pid <> pg_backend_pid()",
            url.database,
        )
    finally:
        await connection.close()


async def test_two_instances_racing_on_one_stream_never_both_land(
    pair: tuple[SqlStore, SqlStore],
) -> None:
    # Each write checks the stream is where it expects, then writes; the loser of a race (both
    # checked before either wrote) fails on the chunk's key, writing nothing.
    first, second = pair
    for sequence in range(1, 21):
        outcomes = await asyncio.gather(
            *(
                store.commit(
                    WriteBatch(
                        chunks=[ChunkAppend("raced", [delta("raced", sequence)])],
                        streams=[StreamUpdate("raced", "running")],
                    )
                )
                for store in (first, second)
            ),
            return_exceptions=True,
        )
        landed = [outcome for outcome in outcomes if outcome is None]
        assert len(landed) == 1, outcomes
        assert all(isinstance(o, WriteConflictError) for o in outcomes if o is not None)
    chunks = await second.read_chunks("raced")
    assert [chunk.sequence for chunk in chunks] == list(range(1, 21))
    assert (await first.get_stream("raced")).last_sequence == 20


async def test_two_instances_claiming_together_keep_the_cap_and_the_order(
    pair: tuple[SqlStore, SqlStore],
) -> None:
    first, second = pair
    cap, total = 5, 40
    ids = [f"c{n:02d}" for n in range(total)]
    children = [
        SessionRecord(i, "agent", "root", "running", 1, 1, parent_session_id="root") for i in ids
    ]
    await first.commit(
        WriteBatch(
            new_sessions=[SessionRecord("root", "agent", "root", "running", 1, 1), *children],
            enqueued=[QueueEntry(i, "root", "root", "queued", 0, None, 1) for i in ids],
        )
    )
    seqs = {entry.session_id: entry.seq for entry in await first.list_queue("root")}
    # Each instance starts the children its own trees run: every third one is the first's.
    owned = {first: set(ids[::3]), second: set(ids) - set(ids[::3])}
    claimed: list[str] = []
    finishing: set[asyncio.Task[None]] = set()
    draw = random.Random(7)

    async def finish(store: SqlStore, session_id: str, after: float) -> None:
        await asyncio.sleep(after)
        await store.commit(WriteBatch(dequeued=[session_id]))

    async def claim(store: SqlStore) -> None:
        while owned[store]:
            took = await store.claim_queued(cap, owned[store], now_ms())
            if not took:
                await asyncio.sleep(0.002)
                continue
            owned[store] -= set(took)
            claimed.extend(took)
            assert (await store.queue_counts())[1] <= cap
            # FIFO: a claim takes from the first free rows (another's heads among them keep
            # their place), so fewer rows than the rest of that window still wait before it.
            assert took == sorted(took, key=seqs.__getitem__)
            last = max(seqs[i] for i in took)
            waiting = [e.session_id for e in await store.list_queue("root") if e.state == "queued"]
            ahead = [i for i in waiting if seqs[i] < last]
            assert len(ahead) <= cap - len(took), (took, ahead)
            for session_id in took:
                task = asyncio.create_task(finish(store, session_id, draw.uniform(0, 0.01)))
                finishing.add(task)

    async def watch() -> None:
        while len(claimed) < total:
            _, running = await second.queue_counts()
            assert running <= cap
            await asyncio.sleep(0.001)

    await asyncio.wait_for(asyncio.gather(claim(first), claim(second), watch()), 60)
    await asyncio.gather(*finishing)
    assert sorted(claimed) == ids
    assert await first.queue_counts() == (0, 0)
