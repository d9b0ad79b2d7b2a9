"""Group commit: concurrent commits share transactions, keep their order, and fail alone."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Sequence
from typing import Literal

import pytest

from app.errors import (
    SessionExistsError,
    SessionNotFoundError,
    StoreClosedError,
    StoreError,
    WriteConflictError,
)
from app.protocol import SubSessionRef, TextDeltaChunk, UserMessage
from app.store import (
    ChunkAppend,
    MessageAppend,
    RefUpsert,
    SessionRecord,
    StreamUpdate,
    WriteBatch,
)
from app.store.sql import SqlStore
from app.store.sql.group_commit import GroupCommitter


def delta(stream_id: str, sequence: int) -> TextDeltaChunk:
    return TextDeltaChunk(
        sequence=sequence, agent_id=stream_id, agent_type="a", step=1, timestamp=1, delta="x"
    )


def session(session_id: str, **changes: object) -> SessionRecord:
    record = SessionRecord(session_id, "agent", session_id, "running", 1, 1)
    return record.evolve(**changes)


@pytest.fixture
async def sql_store(sql_url: str) -> AsyncIterator[SqlStore]:
    async with SqlStore(sql_url) as store:
        yield store


# -- against a database ---------------------------------------------------------------------------


async def test_concurrent_commits_share_transactions_and_a_bad_batch_fails_alone(
    sql_store: SqlStore,
) -> None:
    streams, per_stream = 20, 10
    bad_stream, bad_sequence = "st-7", 5

    async def writer(stream_id: str) -> list[BaseException | None]:
        outcomes: list[BaseException | None] = []
        for sequence in range(1, per_stream + 1):
            wrong = stream_id == bad_stream and sequence == bad_sequence
            chunk = delta(stream_id, sequence + 100 if wrong else sequence)
            try:
                await sql_store.commit(WriteBatch(chunks=[ChunkAppend(stream_id, [chunk])]))
            except WriteConflictError as exc:
                outcomes.append(exc)
                fixed = delta(stream_id, sequence)
                await sql_store.commit(WriteBatch(chunks=[ChunkAppend(stream_id, [fixed])]))
                continue
            outcomes.append(None)
        return outcomes

    groups_before = sql_store.commit_groups
    results = await asyncio.gather(*(writer(f"st-{i}") for i in range(streams)))

    for index, outcomes in enumerate(results):
        failed = [position + 1 for position, error in enumerate(outcomes) if error is not None]
        if f"st-{index}" == bad_stream:
            assert failed == [bad_sequence]
            assert "does not follow 4" in str(outcomes[bad_sequence - 1])
        else:
            assert failed == []
    for index in range(streams):
        stream_id = f"st-{index}"
        chunks = await sql_store.read_chunks(stream_id)
        assert [c.sequence for c in chunks] == list(range(1, per_stream + 1))
        assert {c.agent_id for c in chunks} == {stream_id}
        assert (await sql_store.get_stream(stream_id)).last_sequence == per_stream
    commits = streams * per_stream
    assert sql_store.commit_groups - groups_before < commits / 2


async def test_commits_issued_together_land_in_arrival_order(sql_store: SqlStore) -> None:
    tasks = [
        asyncio.create_task(
            sql_store.commit(WriteBatch(chunks=[ChunkAppend("ordered", [delta("ordered", n)])]))
        )
        for n in range(1, 201)
    ]
    await asyncio.gather(*tasks)
    assert [c.sequence for c in await sql_store.read_chunks("ordered")] == list(range(1, 201))


async def test_each_failing_batch_gets_its_own_error(sql_store: SqlStore) -> None:
    await sql_store.commit(WriteBatch(new_sessions=[session("taken", idempotency_key="k")]))
    ref = SubSessionRef(
        sub_session_id="p-sub-1",
        agent_type="c",
        parent_tool_call_id="1",
        status="running",
        started_at=1,
    )
    batches = [
        WriteBatch(new_sessions=[session("fresh-1")]),
        WriteBatch(new_sessions=[session("taken")]),
        WriteBatch(updated_sessions=[session("ghost")]),
        WriteBatch(new_sessions=[session("other", idempotency_key="k")]),
        WriteBatch(messages=[MessageAppend("fresh-1", 1, UserMessage(content="gap"))]),
        WriteBatch(
            messages=[MessageAppend("fresh-1", 0, UserMessage(content="hi"))],
            refs=[RefUpsert("fresh-1", ref)],
            streams=[StreamUpdate("fresh-1", "running")],
        ),
        WriteBatch(updated_sessions=[session("fresh-1", step_count=3)]),
    ]
    outcomes = await asyncio.gather(
        *(sql_store.commit(batch) for batch in batches), return_exceptions=True
    )
    assert [type(outcome) for outcome in outcomes] == [
        type(None),
        SessionExistsError,
        SessionNotFoundError,
        SessionExistsError,
        WriteConflictError,
        type(None),
        type(None),
    ]
    assert (await sql_store.get_session("fresh-1")).step_count == 3
    assert await sql_store.load_messages("fresh-1") == [UserMessage(content="hi")]
    assert await sql_store.get_sub_session_refs("fresh-1") == [ref]
    with pytest.raises(SessionNotFoundError):
        await sql_store.get_session("other")


async def test_an_update_before_its_session_is_created_fails_even_when_grouped(
    sql_store: SqlStore,
) -> None:
    # The refused update leaves the creation that follows it on its stream to the rules.
    outcomes = await asyncio.gather(
        sql_store.submit(WriteBatch(updated_sessions=[session("later", step_count=1)])),
        sql_store.submit(WriteBatch(new_sessions=[session("later")])),
        return_exceptions=True,
    )
    assert isinstance(outcomes[0], SessionNotFoundError)
    assert outcomes[1] is None
    assert (await sql_store.get_session("later")).step_count == 0


async def test_a_group_applies_its_batches_net_effect_as_if_one_after_another(
    sql_store: SqlStore,
) -> None:
    def ref(sub: str, status: Literal["running", "failed"]) -> RefUpsert:
        return RefUpsert(
            "net",
            SubSessionRef(
                sub_session_id=sub,
                agent_type="c",
                parent_tool_call_id=sub,
                status=status,
                started_at=1,
            ),
        )

    created = session("net", owner_id="me", lease_expires_at=99)
    first_update = session("net", step_count=1, owner_id=None)
    second_update = session("net", step_count=2, state={"k": 1})
    batches = [
        WriteBatch(new_sessions=[created], refs=[ref("a", "running")]),
        WriteBatch(updated_sessions=[first_update], refs=[ref("b", "running"), ref("a", "failed")]),
        WriteBatch(updated_sessions=[second_update]),
    ]
    groups_before = sql_store.commit_groups
    await asyncio.gather(*(sql_store.commit(batch) for batch in batches))
    assert sql_store.commit_groups - groups_before == 1
    assert await sql_store.get_session("net") == session(
        "net", step_count=2, state={"k": 1}, owner_id="me", lease_expires_at=99
    )
    refs = await sql_store.get_sub_session_refs("net")
    assert refs == [ref("a", "failed").ref, ref("b", "running").ref]


async def test_a_session_created_and_stopped_in_one_group_holds_no_lease(
    sql_store: SqlStore,
) -> None:
    created = session("brief", owner_id="me", lease_expires_at=99)
    ended = session("brief", status="completed", step_count=1, owner_id="me", lease_expires_at=99)
    groups_before = sql_store.commit_groups
    await asyncio.gather(
        sql_store.commit(WriteBatch(new_sessions=[created])),
        sql_store.commit(WriteBatch(updated_sessions=[ended], fence=("brief", "me"), release=True)),
    )
    assert sql_store.commit_groups - groups_before == 1
    assert await sql_store.get_session("brief") == dataclasses.replace(
        ended, owner_id=None, lease_expires_at=None
    )


async def test_a_conversation_cleared_within_a_group_restarts_from_zero(sql_url: str) -> None:
    # Batches of messages alone name no stream, so only a single writer groups them together.
    async with SqlStore(sql_url, write_lanes=1) as sql_store:
        await _cleared_within_a_group(sql_store)


async def _cleared_within_a_group(sql_store: SqlStore) -> None:
    def message(session_id: str, index: int, text: str) -> MessageAppend:
        return MessageAppend(session_id, index, UserMessage(content=text))

    await sql_store.commit(
        WriteBatch(new_sessions=[session("c")], messages=[message("c", 0, "old")])
    )
    groups_before = sql_store.commit_groups
    await asyncio.gather(
        sql_store.commit(WriteBatch(messages=[message("c", 1, "dropped")])),
        sql_store.commit(WriteBatch(cleared_messages=["c"], messages=[message("c", 0, "new")])),
        sql_store.commit(WriteBatch(messages=[message("c", 1, "next")])),
    )
    assert sql_store.commit_groups - groups_before == 1
    assert await sql_store.load_messages("c") == [
        UserMessage(content="new"),
        UserMessage(content="next"),
    ]


async def test_closing_commits_what_is_queued(sql_url: str) -> None:
    store = SqlStore(sql_url)
    await store.__aenter__()
    tasks = [
        asyncio.create_task(store.commit(WriteBatch(new_sessions=[session(f"q-{n}")])))
        for n in range(50)
    ]
    await asyncio.sleep(0)
    await store.__aexit__(None, None, None)
    await asyncio.gather(*tasks)
    async with SqlStore(sql_url) as reopened:
        for n in range(50):
            assert (await reopened.get_session(f"q-{n}")).session_id == f"q-{n}"


# -- the committer alone --------------------------------------------------------------------------


class FakeDatabase:
    """Records the groups applied; refuses any group holding a batch marked bad."""

    def __init__(self) -> None:
        self.groups: list[list[str]] = []
        self.landed: list[str] = []
        self.gate = asyncio.Event()
        self.gate.set()

    async def apply(self, batches: Sequence[WriteBatch]) -> None:
        names = [batch.streams[0].stream_id for batch in batches]
        self.groups.append(names)
        await self.gate.wait()
        if any(name.startswith("bad") for name in names):
            raise SessionExistsError(f"refused {names}")
        self.landed.extend(names)


def named(name: str) -> WriteBatch:
    return WriteBatch(streams=[StreamUpdate(name, "running")])


async def test_a_failed_group_is_replayed_batch_by_batch() -> None:
    database = FakeDatabase()
    committer = GroupCommitter(database.apply)
    committer.start()
    database.gate.clear()
    first = committer.enqueue(named("first"))
    await asyncio.sleep(0.01)
    rest = [committer.enqueue(named(n)) for n in ("a", "bad", "b")]
    await asyncio.sleep(0.01)
    database.gate.set()
    await first
    outcomes = await asyncio.gather(*rest, return_exceptions=True)
    await committer.close()
    assert database.groups == [["first"], ["a", "bad", "b"], ["a"], ["bad"], ["b"]]
    assert database.landed == ["first", "a", "b"]
    assert outcomes[0] is None
    assert isinstance(outcomes[1], SessionExistsError)
    assert str(outcomes[1]) == "refused ['bad']"
    assert outcomes[2] is None


async def test_a_commit_cancelled_while_queued_is_withdrawn() -> None:
    database = FakeDatabase()
    committer = GroupCommitter(database.apply, max_batches=2)
    committer.start()
    database.gate.clear()
    first = committer.enqueue(named("first"))
    await asyncio.sleep(0.01)
    withdrawn = committer.enqueue(named("withdrawn"))
    kept = committer.enqueue(named("kept"))
    await asyncio.sleep(0.01)
    withdrawn.cancel()
    database.gate.set()
    await asyncio.gather(first, kept)
    await committer.close()
    assert database.landed == ["first", "kept"]
    with pytest.raises(StoreClosedError):
        committer.enqueue(named("late"))


async def test_settled_is_told_once_per_batch_whatever_became_of_it() -> None:
    # What the write lanes count on to release a stream: landed, refused, withdrawn while
    # queued, or taken by the writer after its caller went away.
    database = FakeDatabase()
    committer = GroupCommitter(database.apply)
    committer.start()
    settled: list[str] = []
    database.gate.clear()

    def enqueue(name: str) -> asyncio.Future[None]:
        return committer.enqueue(named(name), settled=lambda: settled.append(name))

    taken = enqueue("taken")
    await asyncio.sleep(0.01)
    outcomes = {name: enqueue(name) for name in ("ok", "bad", "withdrawn")}
    outcomes["withdrawn"].cancel()
    taken.cancel()
    database.gate.set()
    await asyncio.gather(*outcomes.values(), return_exceptions=True)
    await committer.close()
    assert database.landed == ["taken", "ok"]
    assert sorted(settled) == ["bad", "ok", "taken", "withdrawn"]


async def test_groups_are_bounded() -> None:
    database = FakeDatabase()
    committer = GroupCommitter(database.apply, max_batches=4)
    committer.start()
    database.gate.clear()
    blocker = committer.enqueue(named("blocker"))
    await asyncio.sleep(0.01)
    tasks = [committer.enqueue(named(f"n{i}")) for i in range(10)]
    await asyncio.sleep(0.01)
    database.gate.set()
    await asyncio.gather(blocker, *tasks)
    await committer.close()
    assert [len(group) for group in database.groups] == [1, 4, 4, 2]
    assert database.landed == ["blocker", *(f"n{i}" for i in range(10))]


async def test_a_held_batch_waits_a_moment_for_one_someone_waits_for() -> None:
    database = FakeDatabase()
    committer = GroupCommitter(database.apply, hold=0.2)
    committer.start()
    held = committer.enqueue(named("child-end"), hold=True)
    await asyncio.sleep(0.02)
    assert database.groups == []
    await committer.enqueue(named("parent-step"))
    assert held.done()
    assert database.groups == [["child-end", "parent-step"]]
    # Alone, it is committed once the hold has passed.
    alone = committer.enqueue(named("alone"), hold=True)
    await asyncio.wait_for(alone, 2)
    assert database.groups[-1] == ["alone"]
    # Closing commits held batches at once.
    last = committer.enqueue(named("last"), hold=True)
    await asyncio.wait_for(committer.close(), 0.1)
    assert last.done()
    assert database.landed == ["child-end", "parent-step", "alone", "last"]


def status_batch(stream_id: str, status: Literal["running", "failed", "completed"]) -> WriteBatch:
    return WriteBatch(streams=[StreamUpdate(stream_id, status)])


@pytest.mark.parametrize(
    ("refusal", "follower_lands"),
    [(StoreError("the database went away"), False), (SessionExistsError("it exists"), True)],
)
async def test_what_follows_a_failed_batch_on_its_stream(
    refusal: Exception, follower_lands: bool
) -> None:
    landed: list[tuple[str, str]] = []
    gate = asyncio.Event()

    async def apply(batches: Sequence[WriteBatch]) -> None:
        await gate.wait()
        if any(batch.streams[0].status == "failed" for batch in batches):
            raise refusal
        landed.extend((batch.streams[0].stream_id, batch.streams[0].status) for batch in batches)

    committer = GroupCommitter(apply)
    committer.start()
    first = committer.enqueue(status_batch("s", "running"))
    await asyncio.sleep(0.01)  # taken alone: the next three make one group
    failed = committer.enqueue(status_batch("s", "failed"))
    follower = committer.enqueue(status_batch("s", "completed"))
    unrelated = committer.enqueue(status_batch("t", "completed"))
    gate.set()
    outcomes = await asyncio.gather(first, failed, follower, unrelated, return_exceptions=True)
    await committer.close()
    assert outcomes[0] is None
    assert outcomes[1] is refusal
    assert outcomes[3] is None
    if follower_lands:
        assert outcomes[2] is None
        assert landed == [("s", "running"), ("s", "completed"), ("t", "completed")]
    else:
        assert isinstance(outcomes[2], StoreError)
        assert "An earlier write of stream 's' failed" in str(outcomes[2])
        assert landed == [("s", "running"), ("t", "completed")]
