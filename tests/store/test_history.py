"""The store contract for the UI's reads: listing sessions, paging a conversation, a stream's
sessions. Every `StateStore` implementation must pass this module unchanged."""

from __future__ import annotations

import dataclasses

from app.protocol import AssistantMessage, ToolCall, ToolMessage, UserMessage
from app.store import MessageAppend, SessionCursor, SessionRecord, StateStore, WriteBatch


def session(session_id: str, created_at: int, **changes: object) -> SessionRecord:
    base = SessionRecord(
        session_id=session_id,
        agent_type="agent",
        stream_id=session_id,
        status="completed",
        created_at=created_at,
        updated_at=created_at,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


async def seed(store: StateStore) -> None:
    await store.commit(
        WriteBatch(
            new_sessions=[
                session("a", 100),
                session("b", 200, agent_type="other"),
                session("c", 200, status="running"),
                session("d", 300, status="failed", error="boom"),
                # Children share their root's stream: never listed as sessions of their own.
                session("c-sub-1", 250, stream_id="c", parent_session_id="c", status="running"),
                session("c-sub-1-sub-2", 260, stream_id="c", parent_session_id="c-sub-1"),
                # A root started by a remote parent owns its stream: it is listed.
                session("e", 50, parent_session_id="elsewhere"),
            ]
        )
    )


def ids(records: list[SessionRecord]) -> list[str]:
    return [record.session_id for record in records]


async def test_sessions_are_listed_newest_first_roots_only(store: StateStore) -> None:
    await seed(store)
    listed = await store.list_sessions()
    assert ids(listed) == ["d", "c", "b", "a", "e"]
    assert listed[0] == await store.get_session("d")


async def test_sessions_filter_by_status_and_agent_type(store: StateStore) -> None:
    await seed(store)
    assert ids(await store.list_sessions(statuses=["completed"])) == ["b", "a", "e"]
    assert ids(await store.list_sessions(statuses=["running", "failed"])) == ["d", "c"]
    assert ids(await store.list_sessions(agent_type="other")) == ["b"]
    assert ids(await store.list_sessions(agent_type="other", statuses=["running"])) == []
    assert await store.list_sessions(agent_type="nobody") == []


async def test_sessions_page_by_cursor_without_gaps_or_repeats(store: StateStore) -> None:
    await seed(store)
    pages = []
    before = None
    while True:
        page = await store.list_sessions(before=before, limit=2)
        pages.append(ids(page))
        if len(page) < 2:
            break
        before = SessionCursor.after(page[-1])
    assert pages == [["d", "c"], ["b", "a"], ["e"]]
    # Sessions of the same millisecond are ordered by id: the cursor falls between them.
    assert ids(await store.list_sessions(before=SessionCursor(200, "c"))) == ["b", "a", "e"]
    assert ids(await store.list_sessions(before=SessionCursor(200, "b"), limit=1)) == ["a"]
    filtered = await store.list_sessions(statuses=["completed"], before=SessionCursor(200, "b"))
    assert ids(filtered) == ["a", "e"]
    assert await store.list_sessions(limit=0) == []


async def test_a_new_session_does_not_shift_the_next_page(store: StateStore) -> None:
    await seed(store)
    first = await store.list_sessions(limit=2)
    await store.commit(WriteBatch(new_sessions=[session("z", 999)]))
    second = await store.list_sessions(before=SessionCursor.after(first[-1]), limit=2)
    assert ids(second) == ["b", "a"]


async def test_a_conversation_reads_by_pages(store: StateStore) -> None:
    conversation = [
        UserMessage(content="hi"),
        AssistantMessage(content="calling", tool_calls=(ToolCall("add", {"a": 1}, id="c1"),)),
        ToolMessage(tool_call_id="c1", tool_name="add", result=2),
        AssistantMessage(content="2"),
        UserMessage(content="more"),
    ]
    await store.commit(
        WriteBatch(
            new_sessions=[session("s", 1)],
            messages=[MessageAppend("s", i, m) for i, m in enumerate(conversation)],
        )
    )
    assert await store.read_messages("s") == conversation
    assert await store.read_messages("s", offset=1, limit=2) == conversation[1:3]
    assert await store.read_messages("s", offset=4, limit=10) == conversation[4:]
    assert await store.read_messages("s", offset=5) == []
    assert await store.read_messages("s", limit=0) == []
    assert await store.read_messages("missing") == []


async def test_a_streams_sessions_are_its_root_and_local_descendants(store: StateStore) -> None:
    await seed(store)
    assert ids(await store.list_stream_sessions("c")) == ["c", "c-sub-1", "c-sub-1-sub-2"]
    assert ids(await store.list_stream_sessions("a")) == ["a"]
    assert await store.list_stream_sessions("missing") == []
