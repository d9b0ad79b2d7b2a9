"""Write lanes: unrelated streams commit in parallel, one stream's batches keep their order."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from app.protocol import SubSessionRef
from app.store import RefUpsert, StreamUpdate, WriteBatch
from app.store.sql.lanes import WriteLanes
from tests.store.test_group_commit import session


class LaneDatabase:
    """Applies groups slowly, recording which ran at once and the order batches landed in."""

    def __init__(self) -> None:
        self.running = 0
        self.most_at_once = 0
        self.landed: list[str] = []
        self.gate = asyncio.Event()
        self.gate.set()

    async def apply(self, batches: Sequence[WriteBatch]) -> None:
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            await self.gate.wait()
            await asyncio.sleep(0.005)
            self.landed.extend(label(batch) for batch in batches)
        finally:
            self.running -= 1


def label(batch: WriteBatch) -> str:
    if batch.streams:
        return batch.streams[0].status + ":" + batch.streams[0].stream_id
    return "ref:" + batch.refs[0].ref.sub_session_id


def step(stream_id: str, n: int) -> WriteBatch:
    return WriteBatch(streams=[StreamUpdate(stream_id, "running" if n % 2 else "interrupted")])


def ref_only(name: str) -> WriteBatch:
    ref = SubSessionRef(
        sub_session_id=name, agent_type="a", parent_tool_call_id="c", status="running", started_at=1
    )
    return WriteBatch(refs=[RefUpsert("parent", ref)])


def of(stream_id: str, landed: list[str]) -> list[str]:
    return [name for name in landed if name.endswith(":" + stream_id)]


def test_a_batch_names_the_streams_it_writes() -> None:
    batch = WriteBatch(
        new_sessions=[session("a")],
        updated_sessions=[session("b")],
        streams=[StreamUpdate("c", "running")],
    )
    assert batch.stream_ids() == {"a", "b", "c"}
    assert ref_only("x").stream_ids() == frozenset()


async def test_unrelated_streams_commit_at_once_and_each_keeps_its_order() -> None:
    database = LaneDatabase()
    lanes = WriteLanes(database.apply, count=2)
    lanes.start()
    submitted = [step(f"s{n % 4}", n) for n in range(40)]
    await asyncio.gather(*(lanes.submit(batch) for batch in submitted))
    await lanes.close()
    assert database.most_at_once == 2
    for stream in ("s0", "s1", "s2", "s3"):
        assert of(stream, database.landed) == of(stream, [label(b) for b in submitted])
    assert lanes.groups >= 2


async def test_one_lane_is_a_single_writer() -> None:
    database = LaneDatabase()
    lanes = WriteLanes(database.apply, count=1)
    lanes.start()
    await asyncio.gather(*(lanes.submit(step(f"s{n}", n)) for n in range(10)))
    await lanes.close()
    assert database.most_at_once == 1


async def test_a_batch_naming_no_stream_overtakes_nothing_and_is_not_overtaken() -> None:
    database = LaneDatabase()
    lanes = WriteLanes(database.apply, count=3)
    lanes.start()
    database.gate.clear()
    before = [asyncio.ensure_future(lanes.submit(step(f"s{n}", 1))) for n in range(3)]
    await asyncio.sleep(0.01)
    barrier = asyncio.ensure_future(lanes.submit(ref_only("barrier")))
    after = [asyncio.ensure_future(lanes.submit(step(f"s{n}", 2))) for n in range(3)]
    await asyncio.sleep(0.01)
    database.gate.set()
    await asyncio.gather(*before, barrier, *after)
    await lanes.close()
    position = database.landed.index("ref:barrier")
    assert sorted(database.landed[:position]) == ["running:s0", "running:s1", "running:s2"]
    assert sorted(database.landed[position + 1 :]) == [
        "interrupted:s0",
        "interrupted:s1",
        "interrupted:s2",
    ]


async def test_a_batch_of_streams_held_by_two_lanes_waits_for_both() -> None:
    database = LaneDatabase()
    lanes = WriteLanes(database.apply, count=2)
    lanes.start()
    database.gate.clear()
    first = [asyncio.ensure_future(lanes.submit(step(name, 1))) for name in ("x", "y")]
    await asyncio.sleep(0.01)
    both = WriteBatch(streams=[StreamUpdate("x", "completed"), StreamUpdate("y", "completed")])
    joined = asyncio.ensure_future(lanes.submit(both))
    later = asyncio.ensure_future(lanes.submit(step("x", 2)))
    await asyncio.sleep(0.01)
    database.gate.set()
    await asyncio.gather(*first, joined, later)
    await lanes.close()
    assert database.landed[2:] == ["completed:x", "interrupted:x"]


async def test_a_caller_cancelled_while_blocked_or_queued_withdraws_its_batch() -> None:
    database = LaneDatabase()
    lanes = WriteLanes(database.apply, count=2)
    lanes.start()
    database.gate.clear()
    first = asyncio.ensure_future(lanes.submit(step("s", 1)))
    await asyncio.sleep(0.01)
    queued = asyncio.ensure_future(lanes.submit(step("s", 2)))
    blocked = asyncio.ensure_future(lanes.submit(ref_only("blocked")))
    await asyncio.sleep(0.01)
    queued.cancel()
    blocked.cancel()
    database.gate.set()
    await first
    for task in (queued, blocked):
        with pytest.raises(asyncio.CancelledError):
            await task
    await lanes.submit(step("s", 3))
    await lanes.close()
    assert database.landed == ["running:s", "running:s"]
