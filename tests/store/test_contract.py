"""The store contract: every `StateStore` implementation must pass this module unchanged."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from app.errors import (
    LeaseLostError,
    SessionExistsError,
    SessionNotFoundError,
    StoreClosedError,
    StreamNotFoundError,
    WriteConflictError,
)
from app.protocol import (
    AssistantMessage,
    ErrorChunk,
    InterruptedChunk,
    OutputChunk,
    RemoteRef,
    SessionStatus,
    SubagentEndChunk,
    SubagentStartChunk,
    SubSessionRef,
    TextDeltaChunk,
    ToolCall,
    ToolEndChunk,
    ToolMessage,
    ToolPendingChunk,
    ToolStartChunk,
    UserMessage,
    chunk_to_json,
)
from app.store import (
    ChunkAppend,
    InboxAppend,
    InboxTake,
    MemoryStore,
    MessageAppend,
    QueueEntry,
    QueueMove,
    QueueState,
    RefUpsert,
    SessionRecord,
    StateStore,
    StreamState,
    StreamUpdate,
    WriteBatch,
    now_ms,
)
from app.store.records import StreamPage


def session(session_id: str = "s1", **changes: object) -> SessionRecord:
    base = SessionRecord(
        session_id=session_id,
        agent_type="agent",
        stream_id=session_id,
        status="running",
        created_at=1_000,
        updated_at=1_000,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def delta(sequence: int, text: str = "x", agent_id: str = "s1") -> TextDeltaChunk:
    return TextDeltaChunk(
        sequence=sequence, agent_id=agent_id, agent_type="agent", step=1, timestamp=5, delta=text
    )


async def create(store: StateStore, *records: SessionRecord) -> None:
    await store.commit(WriteBatch(new_sessions=list(records)))


# -- sessions -------------------------------------------------------------------------------------


async def test_session_round_trips_every_field(store: StateStore) -> None:
    record = session(
        "root",
        parent_session_id="p",
        step_count=3,
        state={"notes": ["a"], "n": 1},
        input={"message": "hi", "nested": {"x": [1, 2]}},
        output={"answer": 42},
        error="boom",
        failure_reason="parent_suspended",
        idempotency_key="key-1",
        input_tokens=10,
        output_tokens=20,
        owner_id="owner-a",
        lease_expires_at=99_999,
    )
    await create(store, record)
    assert await store.get_session("root") == record


async def test_unknown_session_is_not_found(store: StateStore) -> None:
    with pytest.raises(SessionNotFoundError):
        await store.get_session("missing")


async def test_duplicate_session_is_a_conflict_and_changes_nothing(store: StateStore) -> None:
    await create(store, session("a"))
    batch = WriteBatch(
        new_sessions=[session("b"), session("a", agent_type="other")],
        messages=[MessageAppend("b", 0, UserMessage(content="hi"))],
    )
    with pytest.raises(SessionExistsError):
        await store.commit(batch)
    with pytest.raises(SessionNotFoundError):
        await store.get_session("b")
    assert await store.load_messages("b") == []
    assert (await store.get_session("a")).agent_type == "agent"


async def test_update_replaces_the_record_but_not_its_lease(store: StateStore) -> None:
    await create(store, session("a", owner_id="me", lease_expires_at=5_000))
    updated = session("a", step_count=2, state={"k": 1}, owner_id="other", lease_expires_at=1)
    await store.commit(WriteBatch(updated_sessions=[updated]))
    assert await store.get_session("a") == dataclasses.replace(
        updated, owner_id="me", lease_expires_at=5_000
    )


@pytest.mark.parametrize("status", ["completed", "failed", "interrupted", "paused_awaiting_client"])
async def test_a_write_that_ends_a_tree_releases_its_lease(
    store: StateStore, status: SessionStatus
) -> None:
    await create(store, session("a", owner_id="me", lease_expires_at=now_ms() + 60_000))
    stopped = session("a", status=status, step_count=2, owner_id="me", lease_expires_at=1)
    await store.commit(WriteBatch(updated_sessions=[stopped], fence=("a", "me"), release=True))
    assert await store.get_session("a") == dataclasses.replace(
        stopped, owner_id=None, lease_expires_at=None
    )
    assert await store.claim_session("a", "other", 60_000)


async def test_update_of_unknown_session_fails_the_batch(store: StateStore) -> None:
    batch = WriteBatch(new_sessions=[session("new")], updated_sessions=[session("ghost")])
    with pytest.raises(SessionNotFoundError):
        await store.commit(batch)
    with pytest.raises(SessionNotFoundError):
        await store.get_session("new")


async def test_idempotency_key_finds_the_session_and_is_unique(store: StateStore) -> None:
    await create(store, session("a", idempotency_key="k"))
    found = await store.find_session_by_idempotency_key("k")
    assert found is not None
    assert found.session_id == "a"
    assert await store.find_session_by_idempotency_key("other") is None
    with pytest.raises(SessionExistsError):
        await create(store, session("b", idempotency_key="k"))


# -- messages -------------------------------------------------------------------------------------


async def test_messages_round_trip_in_order(store: StateStore) -> None:
    messages = [
        UserMessage(content="add 1 and 2"),
        AssistantMessage(
            content="adding",
            tool_calls=(ToolCall("add", {"a": 1, "b": 2}, id="c1"), ToolCall("bad", "{oops", "c2")),
        ),
        ToolMessage(tool_call_id="c1", tool_name="add", result=3),
        ToolMessage(tool_call_id="c2", tool_name="bad", result=None, error="invalid JSON"),
    ]
    await create(store, session("a"))
    await store.commit(
        WriteBatch(messages=[MessageAppend("a", i, m) for i, m in enumerate(messages[:2])])
    )
    await store.commit(
        WriteBatch(messages=[MessageAppend("a", i + 2, m) for i, m in enumerate(messages[2:])])
    )
    assert await store.load_messages("a") == messages


async def test_message_index_conflict_fails_the_batch(store: StateStore) -> None:
    await create(store, session("a"))
    await store.commit(WriteBatch(messages=[MessageAppend("a", 0, UserMessage(content="one"))]))
    batch = WriteBatch(
        updated_sessions=[session("a", step_count=9)],
        messages=[MessageAppend("a", 0, UserMessage(content="again"))],
    )
    with pytest.raises(WriteConflictError):
        await store.commit(batch)
    assert await store.load_messages("a") == [UserMessage(content="one")]
    assert (await store.get_session("a")).step_count == 0


# -- sub-session refs -----------------------------------------------------------------------------


async def test_refs_upsert_keeps_insertion_order_and_every_field(store: StateStore) -> None:
    first = SubSessionRef(
        sub_session_id="p-sub-c1",
        agent_type="child",
        parent_tool_call_id="c1",
        status="running",
        started_at=10,
    )
    second = SubSessionRef(
        sub_session_id="p-remote-c2",
        agent_type="far",
        parent_tool_call_id="c2",
        status="running",
        started_at=11,
        remote=RemoteRef(stream_id="p-remote-c2"),
    )
    await create(store, session("p"))
    await store.commit(WriteBatch(refs=[RefUpsert("p", first), RefUpsert("p", second)]))
    done = first.model_copy(
        update={"status": "completed", "completed_at": 20, "completion_delivered": True}
    )
    moved = second.model_copy(
        update={"remote": RemoteRef(stream_id="p-remote-c2", last_sequence=7)}
    )
    await store.commit(WriteBatch(refs=[RefUpsert("p", moved), RefUpsert("p", done)]))
    assert await store.get_sub_session_refs("p") == [done, moved]
    assert await store.get_sub_session_refs("other") == []


async def test_persistent_ref_round_trips(store: StateStore) -> None:
    ref = SubSessionRef(
        sub_session_id="p-agent-r1",
        agent_type="researcher",
        parent_tool_call_id="c9",
        status="paused_awaiting_client",
        started_at=1,
        mode="persistent",
        name="r1",
    )
    await create(store, session("p"))
    await store.commit(WriteBatch(refs=[RefUpsert("p", ref)]))
    assert await store.get_sub_session_refs("p") == [ref]


# -- chunks ---------------------------------------------------------------------------------------


def every_chunk_type() -> list[object]:
    common = {"agent_id": "s1", "agent_type": "agent", "step": 2, "timestamp": 7}
    return [
        TextDeltaChunk(sequence=1, delta="hé", **common),
        ToolStartChunk(sequence=2, tool_call_id="c", tool_name="t", arguments={"a": 1}, **common),
        ToolEndChunk(sequence=3, tool_call_id="c", tool_name="t", result=[1], error=None, **common),
        SubagentStartChunk(
            sequence=4, sub_agent_type="k", sub_session_id="s1-sub-c", call_id="c", **common
        ),
        SubagentEndChunk(
            sequence=5,
            sub_agent_type="k",
            sub_session_id="s1-sub-c",
            call_id="c",
            result={"success": False, "error": "x"},
            **common,
        ),
        OutputChunk(sequence=6, output={"v": 1.5}, **common),
        ErrorChunk(sequence=7, error="Max steps exceeded", **common),
        InterruptedChunk(sequence=8, reason=None, **common),
        ToolPendingChunk(
            sequence=9,
            tool_call_id="c",
            tool_name="t",
            arguments="raw",
            reason="approval",
            **common,
        ),
    ]


async def test_chunks_of_every_type_round_trip(store: StateStore) -> None:
    chunks = every_chunk_type()
    await store.commit(WriteBatch(chunks=[ChunkAppend("s1", chunks)]))  # type: ignore[arg-type]
    assert await store.read_chunks("s1") == chunks
    assert await store.read_chunks("s1", after=7) == chunks[7:]
    assert await store.read_chunks("s1", after=2, limit=2) == chunks[2:4]
    assert await store.read_chunks("s1", after=9) == []
    assert await store.read_chunks("nowhere") == []


async def test_a_watch_reads_the_wire_json_and_the_progress_together(store: StateStore) -> None:
    chunks = every_chunk_type()
    await store.commit(WriteBatch(chunks=[ChunkAppend("s1", chunks)]))  # type: ignore[arg-type]
    wire = [(chunk.sequence, chunk_to_json(chunk).decode()) for chunk in chunks]
    async with store.watch_stream("s1") as watch:
        assert await watch.read(after=2, limit=2) == StreamPage(wire[2:4], 9, "running")
        assert await watch.read(after=0, limit=100) == StreamPage(wire, 9, "running")
        assert await watch.read(after=7, limit=100) == StreamPage(wire[7:], 9, "running")
        await store.commit(
            WriteBatch(
                chunks=[ChunkAppend("s1", [delta(10)])],
                streams=[StreamUpdate("s1", "completed")],
            )
        )
        ten = (10, chunk_to_json(delta(10)).decode())
        assert await watch.read(after=8, limit=100) == StreamPage([wire[8], ten], 10, "completed")
        assert await watch.read(after=10, limit=100) == StreamPage([], 10, "completed")
    async with store.watch_stream("nowhere") as watch:
        with pytest.raises(StreamNotFoundError):
            await watch.read(after=0, limit=10)


async def test_a_watch_wakes_on_what_changed_since_its_read(store: StateStore) -> None:
    await store.commit(WriteBatch(chunks=[ChunkAppend("s1", [delta(1)])]))
    async with store.watch_stream("s1") as watch:
        assert (await watch.read(after=0, limit=10)).last_sequence == 1
        # A commit between the read and the wait: the wait returns at once.
        await store.commit(WriteBatch(chunks=[ChunkAppend("s1", [delta(2)])]))
        await asyncio.wait_for(watch.wait(5), 1)
        assert (await watch.read(after=1, limit=10)).last_sequence == 2
        # Nothing new: it times out quietly.
        await watch.wait(0.05)
        # A chunk, then a status alone, wake a waiting watch.
        for change in (
            WriteBatch(chunks=[ChunkAppend("s1", [delta(3)])]),
            WriteBatch(streams=[StreamUpdate("s1", "completed")]),
        ):
            await watch.read(after=2, limit=10)
            waiter = asyncio.create_task(watch.wait(5))
            await asyncio.sleep(0.01)
            assert not waiter.done()
            await store.commit(change)
            await asyncio.wait_for(waiter, 1)
        assert await watch.read(after=2, limit=10) == StreamPage(
            [(3, chunk_to_json(delta(3)).decode())], 3, "completed"
        )


async def test_chunk_sequences_must_follow_without_gap(store: StateStore) -> None:
    await store.commit(WriteBatch(chunks=[ChunkAppend("s1", [delta(1), delta(2)])]))
    with pytest.raises(WriteConflictError):
        await store.commit(
            WriteBatch(
                streams=[StreamUpdate("s1", "completed")], chunks=[ChunkAppend("s1", [delta(4)])]
            )
        )
    with pytest.raises(WriteConflictError):
        await store.commit(WriteBatch(chunks=[ChunkAppend("s1", [delta(2)])]))
    state = await store.get_stream("s1")
    assert (state.last_sequence, state.status) == (2, "running")


async def test_stream_state_follows_updates(store: StateStore) -> None:
    with pytest.raises(StreamNotFoundError):
        await store.get_stream("s1")
    await store.commit(WriteBatch(streams=[StreamUpdate("s1", "running")]))
    assert (await store.get_stream("s1")).last_sequence == 0
    await store.commit(
        WriteBatch(
            chunks=[ChunkAppend("s1", [delta(1)])], streams=[StreamUpdate("s1", "completed")]
        )
    )
    state = await store.get_stream("s1")
    assert (state.stream_id, state.last_sequence, state.status) == ("s1", 1, "completed")


async def test_many_streams_interleave_independently(store: StateStore) -> None:
    async def writer(stream_id: str) -> None:
        for sequence in range(1, 21):
            await store.commit(
                WriteBatch(chunks=[ChunkAppend(stream_id, [delta(sequence, agent_id=stream_id)])])
            )

    await asyncio.gather(*(writer(f"st{i}") for i in range(5)))
    for i in range(5):
        chunks = await store.read_chunks(f"st{i}")
        assert [c.sequence for c in chunks] == list(range(1, 21))
        assert {c.agent_id for c in chunks} == {f"st{i}"}


async def test_delete_finished_streams_keeps_running_ones(store: StateStore) -> None:
    await store.commit(
        WriteBatch(
            chunks=[ChunkAppend("done", [delta(1), delta(2)]), ChunkAppend("live", [delta(1)])],
            streams=[StreamUpdate("done", "completed"), StreamUpdate("live", "running")],
        )
    )
    assert await store.delete_finished_streams(older_than_ms=60_000) == 0
    async with store.watch_stream("done") as watch:
        assert [sequence for sequence, _ in (await watch.read(after=0, limit=10)).chunks] == [1, 2]
    await asyncio.sleep(0.01)
    assert await store.delete_finished_streams(older_than_ms=0) == 2
    assert await store.read_chunks("done") == []
    async with store.watch_stream("done") as watch:
        assert await watch.read(after=0, limit=10) == StreamPage([], 2, "completed")
    assert (await store.get_stream("done")).last_sequence == 2
    assert len(await store.read_chunks("live")) == 1


async def test_a_purged_stream_that_runs_and_stops_again_is_purged_again(
    store: StateStore,
) -> None:
    # A cleanup visits each stopped stream once; one resumed and stopped again is due again.
    await store.commit(
        WriteBatch(
            chunks=[ChunkAppend("again", [delta(1), delta(2)])],
            streams=[StreamUpdate("again", "completed")],
        )
    )
    await asyncio.sleep(0.01)
    assert await store.delete_finished_streams(older_than_ms=0) == 2
    assert await store.delete_finished_streams(older_than_ms=0) == 0
    await store.commit(
        WriteBatch(
            chunks=[ChunkAppend("again", [delta(3)])], streams=[StreamUpdate("again", "running")]
        )
    )
    assert await store.delete_finished_streams(older_than_ms=0) == 0
    await store.commit(
        WriteBatch(
            chunks=[ChunkAppend("again", [delta(4)])], streams=[StreamUpdate("again", "failed")]
        )
    )
    await asyncio.sleep(0.01)
    assert await store.delete_finished_streams(older_than_ms=0) == 2
    assert await store.read_chunks("again") == []
    assert await store.get_stream("again") == StreamState("again", 4, "failed")


# -- interrupts -----------------------------------------------------------------------------------


async def test_interrupt_flag_is_checked_and_cleared_once(store: StateStore) -> None:
    assert await store.check_interrupt_flag("s1") is None
    await store.set_interrupt_flag("s1", "first")
    await store.set_interrupt_flag("s1", "stop")
    flag = await store.check_interrupt_flag("s1")
    assert flag is not None
    assert (flag.session_id, flag.reason) == ("s1", "stop")
    assert flag.requested_at <= now_ms()
    assert await store.check_interrupt_flag("s1") is None


async def test_every_interrupt_is_seen_exactly_once_under_concurrency(store: StateStore) -> None:
    seen: list[str] = []
    sets = 40
    done = asyncio.Event()

    async def setter(i: int) -> None:
        await store.set_interrupt_flag(f"flag-{i}", f"r{i}")

    async def checker() -> None:
        while not done.is_set() or len(seen) < sets:
            for i in range(sets):
                flag = await store.check_interrupt_flag(f"flag-{i}")
                if flag is not None:
                    seen.append(flag.session_id)
            await asyncio.sleep(0)

    checkers = [asyncio.create_task(checker()) for _ in range(4)]
    await asyncio.gather(*(setter(i) for i in range(sets)))
    done.set()
    await asyncio.wait_for(asyncio.gather(*checkers), 30)
    assert sorted(seen) == sorted(f"flag-{i}" for i in range(sets))


async def test_interrupt_listeners_hear_of_flags(store: StateStore) -> None:
    heard: list[str] = []
    remove = store.add_interrupt_listener(heard.append)
    await store.set_interrupt_flag("s1", None)
    for _ in range(100):
        if heard:
            break
        await asyncio.sleep(0.01)
    assert heard == ["s1"]
    remove()


# -- leases ---------------------------------------------------------------------------------------


async def test_leases_are_claimed_renewed_and_released(store: StateStore) -> None:
    await create(store, session("a", owner_id="one", lease_expires_at=now_ms() + 60_000))
    assert not await store.claim_session("a", "two", 1_000)
    assert await store.claim_session("a", "one", 1_000)
    assert await store.renew_leases("one", ["a", "ghost"], 60_000) == {"a"}
    assert await store.renew_leases("two", ["a"], 60_000) == set()
    await store.release_session("a", "two")
    assert (await store.get_session("a")).owner_id == "one"
    await store.release_session("a", "one")
    record = await store.get_session("a")
    assert (record.owner_id, record.lease_expires_at) == (None, None)
    assert await store.claim_session("a", "two", 60_000)
    assert (await store.get_session("a")).owner_id == "two"


async def test_expired_lease_can_be_taken_over(store: StateStore) -> None:
    await create(store, session("a", owner_id="dead", lease_expires_at=now_ms() - 1))
    assert await store.claim_session("a", "alive", 60_000)
    with pytest.raises(SessionNotFoundError):
        await store.claim_session("ghost", "alive", 1_000)


async def test_orphaned_trees_have_a_running_session_and_no_live_owner(
    store: StateStore,
) -> None:
    future = now_ms() + 60_000
    await create(
        store,
        session("expired", owner_id="dead", lease_expires_at=now_ms() - 1),
        session("unowned"),
        session("live", owner_id="other", lease_expires_at=future),
        session("mine", owner_id="me", lease_expires_at=future),
        session("done", status="completed"),
        session("child", stream_id="expired", parent_session_id="expired"),
        # A root whose turn ended while a child of its tree runs on: the tree still runs.
        session("turned", status="completed", owner_id="dead", lease_expires_at=now_ms() - 1),
        session("detached", stream_id="turned", parent_session_id="turned"),
        # A tree with nothing running is nobody's concern, whatever its lease says.
        session("idle", status="completed", owner_id="dead", lease_expires_at=now_ms() - 1),
    )
    found = [r.session_id for r in await store.orphaned_trees()]
    assert sorted(found) == ["expired", "turned", "unowned"]
    found = [r.session_id for r in await store.orphaned_trees(owner_id="me")]
    assert sorted(found) == ["expired", "mine", "turned", "unowned"]


async def test_a_batch_gives_up_the_lease_it_is_fenced_by(store: StateStore) -> None:
    future = now_ms() + 60_000
    await create(store, session("r", owner_id="me", lease_expires_at=future))
    ended = session("r", status="completed")
    # An update alone leaves the lease as it is, whatever the status.
    await store.commit(WriteBatch(updated_sessions=[ended], fence=("r", "me")))
    assert (await store.get_session("r")).owner_id == "me"
    await store.commit(WriteBatch(updated_sessions=[ended], fence=("r", "me"), release=True))
    record = await store.get_session("r")
    assert (record.owner_id, record.lease_expires_at) == (None, None)
    # Created and ended in one write: the lease is given up too.
    await store.commit(
        WriteBatch(
            new_sessions=[session("q", owner_id="me", lease_expires_at=future)],
            updated_sessions=[session("q", status="completed")],
            fence=("q", "me"),
            release=True,
        )
    )
    assert (await store.get_session("q")).owner_id is None
    # Given up without an update of the session (the last of its tree to end was a child).
    await create(store, session("t", owner_id="me", lease_expires_at=future))
    await store.commit(
        WriteBatch(
            new_sessions=[session("t-sub-c", stream_id="t", parent_session_id="t")],
            fence=("t", "me"),
            release=True,
        )
    )
    assert (await store.get_session("t")).owner_id is None


# -- lifecycle ------------------------------------------------------------------------------------


async def test_a_closed_store_refuses_calls() -> None:
    store = MemoryStore()
    with pytest.raises(StoreClosedError):
        await store.get_session("a")
    async with store:
        pass
    with pytest.raises(StoreClosedError):
        await store.commit(WriteBatch())


async def test_cleared_messages_restart_a_conversation_atomically(store: StateStore) -> None:
    await create(store, session("a"))
    first = [UserMessage(content="one"), AssistantMessage(content="two")]
    await store.commit(WriteBatch(messages=[MessageAppend("a", i, m) for i, m in enumerate(first)]))
    with pytest.raises(WriteConflictError):
        await store.commit(
            WriteBatch(
                cleared_messages=["a"], messages=[MessageAppend("a", 2, UserMessage(content="x"))]
            )
        )
    assert await store.load_messages("a") == first
    await store.commit(
        WriteBatch(
            cleared_messages=["a"], messages=[MessageAppend("a", 0, UserMessage(content="again"))]
        )
    )
    assert await store.load_messages("a") == [UserMessage(content="again")]


async def test_deleted_sessions_go_with_their_conversations_refs_and_flags(
    store: StateStore,
) -> None:
    """A child started again from scratch supersedes its old subtree in the same write."""
    mid = session("root-sub-m", stream_id="root", parent_session_id="root")
    leaf = session("root-sub-m-sub-l", stream_id="root", parent_session_id="root-sub-m")
    await create(store, session("root"), mid, leaf)

    def ref(parent: str, child: str) -> RefUpsert:
        return RefUpsert(
            parent,
            SubSessionRef(
                sub_session_id=child,
                agent_type="agent",
                parent_tool_call_id="c",
                status="failed",
                started_at=1,
            ),
        )

    await store.commit(
        WriteBatch(
            messages=[
                MessageAppend("root-sub-m", 0, UserMessage(content="m")),
                MessageAppend("root-sub-m-sub-l", 0, UserMessage(content="l")),
            ],
            refs=[
                ref("root", "root-sub-m"),
                ref("root-sub-m", "root-sub-m-sub-l"),
                ref("root-sub-m", "root-sub-m-remote-r"),
            ],
        )
    )
    await store.set_interrupt_flag("root-sub-m-sub-l", "stop")
    await store.commit(
        WriteBatch(
            deleted_sessions=["root-sub-m-sub-l", "never-was"],
            cleared_messages=["root-sub-m"],
            updated_sessions=[dataclasses.replace(mid, status="running", step_count=0)],
            messages=[MessageAppend("root-sub-m", 0, UserMessage(content="again"))],
        )
    )
    with pytest.raises(SessionNotFoundError):
        await store.get_session("root-sub-m-sub-l")
    assert await store.load_messages("root-sub-m-sub-l") == []
    assert await store.check_interrupt_flag("root-sub-m-sub-l") is None
    assert [r.sub_session_id for r in await store.get_sub_session_refs("root-sub-m")] == [
        "root-sub-m-remote-r"
    ]
    assert [r.sub_session_id for r in await store.get_sub_session_refs("root")] == ["root-sub-m"]
    assert await store.load_messages("root-sub-m") == [UserMessage(content="again")]
    # The superseded id is free again: the new run creates its child anew.
    await create(store, leaf)
    assert (await store.get_session("root-sub-m-sub-l")).status == "running"


# -- inbox ----------------------------------------------------------------------------------------


async def test_the_inbox_keeps_order_and_takes_up_to_a_message(store: StateStore) -> None:
    await create(store, session("a"), session("b"))
    await store.commit(WriteBatch(inbox=[InboxAppend("a", "one"), InboxAppend("b", "other")]))
    await store.commit(WriteBatch(inbox=[InboxAppend("a", "two")]))
    queued = await store.read_inbox("a")
    assert [m.content for m in queued] == ["one", "two"]
    assert queued[0].id < queued[1].id
    assert all(m.session_id == "a" and m.created_at > 0 for m in queued)
    # Taking the first leaves the second; one written with the take stays too.
    await store.commit(
        WriteBatch(inbox_taken=[InboxTake("a", queued[0].id)], inbox=[InboxAppend("a", "three")])
    )
    assert [m.content for m in await store.read_inbox("a")] == ["two", "three"]
    assert [m.content for m in await store.read_inbox("b")] == ["other"]
    assert await store.read_inbox("nobody") == []


async def test_a_message_for_an_unknown_session_fails_the_batch(store: StateStore) -> None:
    await create(store, session("a"))
    with pytest.raises(SessionNotFoundError):
        await store.commit(
            WriteBatch(
                updated_sessions=[session("a", step_count=3)],
                inbox=[InboxAppend("nobody", "lost")],
            )
        )
    assert (await store.get_session("a")).step_count == 0
    # A session created in the same batch can be written to.
    await store.commit(WriteBatch(new_sessions=[session("b")], inbox=[InboxAppend("b", "welcome")]))
    assert [m.content for m in await store.read_inbox("b")] == ["welcome"]


async def test_a_deleted_session_takes_its_inbox_with_it(store: StateStore) -> None:
    await create(store, session("a"))
    await store.commit(WriteBatch(inbox=[InboxAppend("a", "stale")]))
    await store.commit(WriteBatch(deleted_sessions=["a"]))
    await create(store, session("a"))
    assert await store.read_inbox("a") == []
    with pytest.raises(SessionNotFoundError):
        await store.commit(WriteBatch(inbox=[InboxAppend("gone", "x")]))


# -- background queue -----------------------------------------------------------------------------


def queued(session_id: str, stream_id: str = "root", state: QueueState = "queued") -> QueueEntry:
    return QueueEntry(session_id, stream_id, "root", state, 0, None, 2_000)


async def enqueue(store: StateStore, *ids: str, stream_id: str = "root") -> None:
    """Create the children and queue them, one batch, in the order given."""
    await store.commit(
        WriteBatch(
            new_sessions=[
                session(i, stream_id=stream_id, parent_session_id=stream_id) for i in ids
            ],
            enqueued=[queued(i, stream_id) for i in ids],
        )
    )


async def row(store: StateStore, session_id: str) -> tuple[str, int | None, int]:
    """The session's queue row's state, started_at and seq (it must have one)."""
    entry = await store.queue_entry(session_id)
    assert entry is not None, session_id
    return entry.state, entry.started_at, entry.seq


async def states(store: StateStore, stream_id: str = "root") -> list[tuple[str, str]]:
    return [(e.session_id, e.state) for e in await store.list_queue(stream_id)]


async def test_queue_rows_take_increasing_seqs_in_insertion_order(store: StateStore) -> None:
    await create(store, session("root"), session("other"))
    await enqueue(store, "b", "a")
    await store.commit(
        WriteBatch(
            new_sessions=[session("c", stream_id="root")],
            enqueued=[QueueEntry("c", "root", "b", "queued", 99, 30_000, 3_000)],
        )
    )
    await enqueue(store, "x", stream_id="other")
    rows = await store.list_queue("root")
    assert [row.session_id for row in rows] == ["b", "a", "c"]
    assert rows[0].seq < rows[1].seq < rows[2].seq
    assert (await row(store, "x"))[2] > rows[2].seq
    assert await store.queue_entry("c") == QueueEntry(
        "c", "root", "b", "queued", rows[2].seq, 30_000, 3_000, None
    )
    assert rows[0] == QueueEntry("b", "root", "root", "queued", rows[0].seq, None, 2_000, None)
    assert await store.queue_entry("nobody") is None
    assert await store.list_queue("nobody") == []
    assert await store.queue_counts() == (4, 0)


async def test_claims_respect_the_cap_and_the_running_rows(store: StateStore) -> None:
    await create(store, session("root"))
    await enqueue(store, "a", "b", "c", "d", "e")
    everyone = {"a", "b", "c", "d", "e"}
    assert await store.claim_queued(2, everyone, 5_000) == ["a", "b"]
    assert (await row(store, "a"))[:2] == ("running", 5_000)
    assert await store.claim_queued(2, everyone, 6_000) == []
    assert await store.queue_counts() == (3, 2)
    # A raised cap frees slots; a finished child (dequeued) frees its own.
    assert await store.claim_queued(3, everyone, 7_000) == ["c"]
    await store.commit(WriteBatch(dequeued=["a", "nobody"]))
    assert await store.queue_entry("a") is None
    assert await store.claim_queued(3, everyone, 8_000) == ["d"]
    assert await store.claim_queued(0, everyone, 9_000) == []
    assert await store.claim_queued(9, [], 9_000) == []
    assert await states(store) == [
        ("b", "running"),
        ("c", "running"),
        ("d", "running"),
        ("e", "queued"),
    ]


async def test_a_claim_skips_heads_of_others_who_keep_their_slot(store: StateStore) -> None:
    await create(store, session("root"))
    await enqueue(store, "a", "b", "c")
    # "a" belongs to another process: it is one of the two heads, so only "b" starts.
    assert await store.claim_queued(2, {"b", "c"}, 1) == ["b"]
    assert await store.claim_queued(2, {"c"}, 2) == []
    assert await store.queue_position("a") == 0
    assert await store.queue_position("c") == 1
    assert await store.claim_queued(2, {"a", "c"}, 3) == ["a"]
    assert await states(store) == [("a", "running"), ("b", "running"), ("c", "queued")]


async def test_held_rows_wait_and_keep_their_place(store: StateStore) -> None:
    await create(store, session("root"))
    await enqueue(store, "a", "b", "c", "d")
    assert await store.claim_queued(1, {"a"}, 10) == ["a"]
    await store.commit(
        WriteBatch(
            queue_moves=[QueueMove("a", "held"), QueueMove("b", "held"), QueueMove("z", "queued")]
        )
    )
    assert (await row(store, "a"))[:2] == ("held", 10)
    assert await store.queue_position("b") is None
    assert await store.queue_counts() == (2, 0)
    assert await store.claim_queued(1, {"a", "b", "c", "d"}, 20) == ["c"]
    # Back in the queue, the held rows are ahead of those queued after them.
    await store.commit(WriteBatch(queue_moves=[QueueMove("a", "queued"), QueueMove("b", "queued")]))
    assert [await store.queue_position(i) for i in "abcd"] == [0, 1, None, 2]
    await store.commit(WriteBatch(dequeued=["c"]))
    assert await store.claim_queued(2, {"d"}, 30) == []
    assert await store.claim_queued(2, {"a", "b", "d"}, 30) == ["a", "b"]
    assert (await row(store, "a"))[:2] == ("running", 30)


async def test_queue_positions_count_the_queued_rows_ahead(store: StateStore) -> None:
    await create(store, session("root"), session("other"))
    await enqueue(store, "a", "b")
    await enqueue(store, "x", stream_id="other")
    await enqueue(store, "c")
    assert [await store.queue_position(i) for i in ("a", "b", "x", "c")] == [0, 1, 2, 3]
    assert await store.claim_queued(1, {"a"}, 1) == ["a"]
    assert [await store.queue_position(i) for i in ("a", "b", "x", "c")] == [None, 0, 1, 2]
    assert await store.queue_position("nobody") is None


async def test_enqueueing_a_queued_session_again_changes_nothing(store: StateStore) -> None:
    await create(store, session("root"))
    await enqueue(store, "a", "b")
    assert await store.claim_queued(1, {"a"}, 1) == ["a"]
    before = await store.list_queue("root")
    await store.commit(WriteBatch(enqueued=[queued("a"), queued("b", state="held")]))
    assert await store.list_queue("root") == before
    # Removed and inserted again in one batch, a row goes to the back.
    await store.commit(WriteBatch(dequeued=["a"], enqueued=[queued("a")]))
    assert await states(store) == [("b", "queued"), ("a", "queued")]


async def test_a_queue_row_for_an_unknown_session_fails_the_batch(store: StateStore) -> None:
    await create(store, session("root"))
    await enqueue(store, "a")
    with pytest.raises(SessionNotFoundError):
        await store.commit(
            WriteBatch(
                updated_sessions=[session("root", step_count=3)],
                enqueued=[queued("nobody")],
                dequeued=["a"],
            )
        )
    assert (await store.get_session("root")).step_count == 0
    assert await states(store) == [("a", "queued")]


async def test_deleted_sessions_take_their_queue_rows(store: StateStore) -> None:
    await create(store, session("root"))
    await enqueue(store, "a", "b")
    assert await store.claim_queued(1, {"a"}, 1) == ["a"]
    await store.commit(WriteBatch(deleted_sessions=["a"]))
    assert await store.queue_entry("a") is None
    assert await store.queue_counts() == (1, 0)
    assert await store.claim_queued(1, {"b"}, 2) == ["b"]


async def test_queue_listeners_hear_of_writes_that_may_free_a_slot(store: StateStore) -> None:
    await create(store, session("root"))
    heard: list[None] = []
    remove = store.add_queue_listener(lambda: heard.append(None))
    await enqueue(store, "a", "b", "c", "d")
    assert heard == []  # inserting rows frees nothing
    assert await store.claim_queued(3, {"a", "b", "c"}, 1) == ["a", "b", "c"]
    await store.commit(WriteBatch(dequeued=["a"]))
    assert len(heard) == 1
    await store.commit(WriteBatch(queue_moves=[QueueMove("b", "held")]))
    assert len(heard) == 2
    await store.commit(WriteBatch(deleted_sessions=["c"]))
    assert len(heard) == 3
    await store.commit(WriteBatch(updated_sessions=[session("root", step_count=1)]))
    assert len(heard) == 3
    remove()
    await store.commit(WriteBatch(dequeued=["d"]))
    assert len(heard) == 3


async def test_a_refused_fence_leaves_the_queue_untouched(store: StateStore) -> None:
    await create(store, session("root", owner_id="me", lease_expires_at=now_ms() + 60_000))
    await enqueue(store, "a", "b")
    before = await store.list_queue("root")
    with pytest.raises(LeaseLostError):
        await store.commit(
            WriteBatch(
                new_sessions=[session("c", stream_id="root")],
                enqueued=[queued("c")],
                queue_moves=[QueueMove("a", "held")],
                dequeued=["b"],
                fence=("root", "other"),
            )
        )
    assert await store.list_queue("root") == before
    await store.commit(WriteBatch(queue_moves=[QueueMove("a", "held")], fence=("root", "me")))
    assert await states(store) == [("a", "held"), ("b", "queued")]


async def test_a_fenced_batch_lands_only_while_its_lease_is_held(store: StateStore) -> None:
    future = now_ms() + 60_000
    fenced = ("r", "me")
    # A session the batch creates holds its record's lease.
    await store.commit(
        WriteBatch(
            new_sessions=[session("r", owner_id="me", lease_expires_at=future)], fence=fenced
        )
    )
    with pytest.raises(LeaseLostError):
        await store.commit(
            WriteBatch(new_sessions=[session("x", owner_id="other")], fence=("x", "me"))
        )
    await store.commit(
        WriteBatch(messages=[MessageAppend("r", 0, UserMessage(content="mine"))], fence=fenced)
    )
    # Another server takes the session over once the lease has lapsed.
    await store.renew_leases("me", ["r"], -1)
    assert await store.claim_session("r", "heir", 60_000)
    with pytest.raises(LeaseLostError):
        await store.commit(
            WriteBatch(
                messages=[MessageAppend("r", 1, UserMessage(content="stale"))],
                updated_sessions=[session("r", step_count=9)],
                fence=fenced,
            )
        )
    assert await store.load_messages("r") == [UserMessage(content="mine")]
    assert (await store.get_session("r")).step_count == 0
    await store.commit(
        WriteBatch(
            messages=[MessageAppend("r", 1, UserMessage(content="heir's"))], fence=("r", "heir")
        )
    )
    assert len(await store.load_messages("r")) == 2
