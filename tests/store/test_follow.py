"""Following streams through store watches: many followers, shared reads, exact delivery."""

from __future__ import annotations

import asyncio
import random

from app.protocol import TextDeltaChunk, chunk_to_json
from app.runtime import StreamFollower
from app.store import ChunkAppend, StateStore, StreamUpdate, WriteBatch
from app.store.records import StreamPage
from app.store.sql import SqlStore
from app.store.sql.watch import TAIL_CHUNKS


def delta(sequence: int) -> TextDeltaChunk:
    return TextDeltaChunk(
        sequence=sequence, agent_id="a", agent_type="a", step=1, timestamp=1, delta=str(sequence)
    )


async def write(store: StateStore, stream_id: str, total: int) -> None:
    """`total` chunks in batches of 1..40, yielding between them, then the final status."""
    rng = random.Random(7)
    sequence = 0
    await store.commit(WriteBatch(streams=[StreamUpdate(stream_id, "running")]))
    while sequence < total:
        size = min(rng.randint(1, 40), total - sequence)
        batch = [delta(sequence + i) for i in range(1, size + 1)]
        await store.commit(WriteBatch(chunks=[ChunkAppend(stream_id, batch)]))
        sequence += size
        await asyncio.sleep(rng.choice((0, 0, 0.001)))
    await store.commit(WriteBatch(streams=[StreamUpdate(stream_id, "completed")]))


async def follow(follower: StreamFollower, slow: bool) -> list[tuple[int, str]]:
    got: list[tuple[int, str]] = []
    async for page in follower.pages():
        got += page
        if slow:
            await asyncio.sleep(0.002)
    return got


async def test_many_followers_get_every_chunk_once_and_the_final_status(
    store: StateStore,
) -> None:
    total = 1200
    await store.commit(WriteBatch(streams=[StreamUpdate("s", "running")]))
    followers = [
        StreamFollower(store, "s", after=after, poll=5)
        for after in (0, 0, 0, 0, 0, 0, 0, 0, 5, 5, 17, 400)
    ]
    reads = [
        asyncio.create_task(follow(follower, slow=i % 3 == 0))
        for i, follower in enumerate(followers)
    ]
    await asyncio.sleep(0.01)
    await write(store, "s", total)
    late = StreamFollower(store, "s", after=1000)
    got = await asyncio.wait_for(asyncio.gather(*reads, follow(late, slow=False)), 30)
    for follower, received in zip([*followers, late], got, strict=True):
        assert follower.status == "completed"
        assert received == [
            (sequence, chunk_to_json(delta(sequence)).decode())
            for sequence in range(received[0][0], total + 1)
        ]
    firsts = [received[0][0] for received in got]
    assert firsts == [1, 1, 1, 1, 1, 1, 1, 1, 6, 6, 18, 401, 1001]


async def test_the_last_page_comes_with_the_status_even_when_it_is_empty(
    store: StateStore,
) -> None:
    await store.commit(
        WriteBatch(chunks=[ChunkAppend("s", [delta(1)])], streams=[StreamUpdate("s", "running")])
    )
    follower = StreamFollower(store, "s", poll=5)
    seen: list[tuple[list[int], str | None]] = []

    async def follow_and_note() -> None:
        async for page in follower.pages():
            seen.append(([sequence for sequence, _ in page], follower.status))
            if len(seen) == 1:
                await store.commit(WriteBatch(chunks=[ChunkAppend("s", [delta(2)])]))
            elif len(seen) == 2:
                await store.commit(WriteBatch(streams=[StreamUpdate("s", "completed")]))

    await asyncio.wait_for(follow_and_note(), 10)
    # The end of a stream whose last chunk was already sent is an empty page, with the status.
    assert seen == [([1], None), ([2], None), ([], "completed")]
    finished = StreamFollower(store, "s", after=1)
    replayed = [(page, finished.status) async for page in finished.pages()]
    assert [([s for s, _ in page], status) for page, status in replayed] == [([2], "completed")]


async def test_watches_at_the_same_tail_share_one_read(sql_url: str) -> None:
    async with SqlStore(sql_url) as store:
        await store.commit(WriteBatch(chunks=[ChunkAppend("s", [delta(1), delta(2)])]))
        async with store.watch_stream("s") as first, store.watch_stream("s") as second:
            at_tail = await asyncio.gather(
                first.read(after=1, limit=10), second.read(after=1, limit=10)
            )
            assert at_tail[0] is at_tail[1]
            assert at_tail[0].chunks == [(2, chunk_to_json(delta(2)).decode())]
            behind = await asyncio.gather(
                first.read(after=1, limit=10), second.read(after=0, limit=10)
            )
            assert [len(page.chunks) for page in behind] == [1, 2]
            # A read after a wake-up never takes the page of a read begun before it.
            before = asyncio.ensure_future(first.read(after=2, limit=10))
            await asyncio.sleep(0)
            await store.commit(WriteBatch(chunks=[ChunkAppend("s", [delta(3)])]))
            after = await second.read(after=2, limit=10)
            assert after.chunks == [(3, chunk_to_json(delta(3)).decode())]
            await before


def counting_reads(store: SqlStore) -> list[int]:
    """Counts the page reads `store` sends to its database (one element per read)."""
    reads: list[int] = []
    read = store._reads._read

    async def counted(stream_id: str, after: int, limit: int) -> StreamPage:
        reads.append(after)
        return await read(stream_id, after, limit)

    store._reads._read = counted
    return reads


def bodies(*sequences: int) -> list[tuple[int, str]]:
    return [(sequence, chunk_to_json(delta(sequence)).decode()) for sequence in sequences]


async def test_a_watch_reads_what_its_own_store_committed_without_a_query(sql_url: str) -> None:
    async with SqlStore(sql_url) as store, SqlStore(sql_url) as other:
        await store.commit(
            WriteBatch(
                chunks=[ChunkAppend("s", [delta(1)])], streams=[StreamUpdate("s", "running")]
            )
        )
        reads = counting_reads(store)
        async with store.watch_stream("s") as watch:
            assert (await watch.read(after=0, limit=10)).chunks == bodies(1)
            await store.commit(WriteBatch(chunks=[ChunkAppend("s", [delta(2), delta(3)])]))
            page = await watch.read(after=1, limit=10)
            assert (page.chunks, page.last_sequence, page.status) == (bodies(2, 3), 3, "running")
            assert (await watch.read(after=2, limit=1)).chunks == bodies(3)
            await store.commit(
                WriteBatch(
                    chunks=[ChunkAppend("s", [delta(4)])], streams=[StreamUpdate("s", "completed")]
                )
            )
            page = await watch.read(after=3, limit=10)
            assert (page.chunks, page.last_sequence, page.status) == (bodies(4), 4, "completed")
            assert reads == [0]
            # Before what this store committed while watching: the database answers.
            assert (await watch.read(after=0, limit=10)).chunks == bodies(1, 2, 3, 4)
            assert reads == [0, 0]
        stored = await other._read_page("s", 0, 10)
        assert (stored.chunks, stored.status) == (bodies(1, 2, 3, 4), "completed")


async def test_a_watch_reads_the_store_once_another_instance_wrote_the_stream(
    sql_url: str,
) -> None:
    async with SqlStore(sql_url) as store, SqlStore(sql_url) as other:
        await store.commit(
            WriteBatch(
                chunks=[ChunkAppend("s", [delta(1)])], streams=[StreamUpdate("s", "running")]
            )
        )
        async with store.watch_stream("s") as watch:
            await watch.read(after=0, limit=10)
            await store.commit(WriteBatch(chunks=[ChunkAppend("s", [delta(2)])]))
            assert (await watch.read(after=1, limit=10)).chunks == bodies(2)
            # Another process takes the stream over (its lease expired, say) and goes on.
            await other.commit(WriteBatch(chunks=[ChunkAppend("s", [delta(3)])]))
            await asyncio.wait_for(watch.wait(10), 10)
            page = await watch.read(after=2, limit=10)
            assert (page.chunks, page.status) == (bodies(3), "running")
            await other.commit(WriteBatch(streams=[StreamUpdate("s", "interrupted")]))
            await asyncio.wait_for(watch.wait(10), 10)
            page = await watch.read(after=3, limit=10)
            assert (page.chunks, page.last_sequence, page.status) == ([], 3, "interrupted")


async def test_a_tail_keeps_the_last_chunks_and_older_ones_are_read_from_the_database(
    sql_url: str,
) -> None:
    async with SqlStore(sql_url) as store:
        await store.commit(WriteBatch(streams=[StreamUpdate("s", "running")]))
        reads = counting_reads(store)
        async with store.watch_stream("s") as watch:
            await watch.read(after=0, limit=10)
            total = TAIL_CHUNKS + 44
            batch = [delta(sequence) for sequence in range(1, total + 1)]
            await store.commit(WriteBatch(chunks=[ChunkAppend("s", batch)]))
            page = await watch.read(after=total - TAIL_CHUNKS, limit=1000)
            assert page.chunks == bodies(*range(total - TAIL_CHUNKS + 1, total + 1))
            assert reads == [0]
            page = await watch.read(after=total - TAIL_CHUNKS - 1, limit=1000)
            assert page.chunks == bodies(*range(total - TAIL_CHUNKS, total + 1))
            assert reads == [0, total - TAIL_CHUNKS - 1]


async def test_a_poll_older_than_the_tail_does_not_make_tail_reads_stale(sql_url: str) -> None:
    async with SqlStore(sql_url) as store:
        await store.commit(
            WriteBatch(
                chunks=[ChunkAppend("s", [delta(1), delta(2)])],
                streams=[StreamUpdate("s", "running")],
            )
        )
        async with store.watch_stream("s") as watch:
            assert (await watch.read(after=0, limit=10)).chunks == bodies(1, 2)
            await store.commit(WriteBatch(chunks=[ChunkAppend("s", [delta(3)])]))
            # The poller's read began before chunk 3 landed and ends after it.
            store._waiters.observe("s", (2, "running"))
            page = await watch.read(after=2, limit=10)
            assert (page.chunks, page.last_sequence) == (bodies(3), 3)
            # The tail's page is newer than the poll, not stale: the wait waits. Were it stale,
            # every wait would return at once and the tail answer every read without a pause,
            # so a follower would spin and never give the loop back.
            loop = asyncio.get_running_loop()
            started = loop.time()
            await watch.wait(0.2)
            assert loop.time() - started >= 0.15
