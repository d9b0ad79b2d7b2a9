"""Following streams through store watches: many followers, shared reads, exact delivery."""

from __future__ import annotations

import asyncio
import random

from app.protocol import TextDeltaChunk, chunk_to_json
from app.runtime import StreamFollower
from app.store import ChunkAppend, StateStore, StreamUpdate, WriteBatch
from app.store.sql import SqlStore


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
