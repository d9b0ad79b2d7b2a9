"""What reaches a session between its steps from outside its own calls: the notices of its
persistent children that ended in the background (for a parent), and the messages queued for
it while it ran (for a persistent child).

Each is taken into the conversation in one write with what marks it taken (the ref's
`completion_delivered`, the inbox's rows), so it arrives exactly once, across a crash too. See
docs/architecture.md, "Persistent children".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from app.agents.results import Update, notice_text, parse_envelope
from app.errors import SessionNotFoundError
from app.protocol import Message, SubSessionRef, SystemMessage, UserMessage
from app.runtime.calls import to_json
from app.runtime.tasks import lifecycle
from app.store import InboxTake, RefUpsert, StateStore, WriteBatch

NOTICE_STATUSES = frozenset({"completed", "failed"})
"""The ends a parent hears of in a notice (a terminated child was ended by the parent)."""
BACKGROUND_ENDS = frozenset({"completed", "failed", "terminated"})
"""The ends of a background `subagent` session (a terminated one was cancelled)."""


@dataclass(slots=True)
class News:
    """Messages for a session's conversation, and the write that marks them taken."""

    messages: list[Message] = field(default_factory=list)
    batch: WriteBatch = field(default_factory=WriteBatch)


async def notices(store: StateStore, session_id: str, news: News) -> None:
    """Add to `news` a notice for each persistent child of the session that ended and whose
    end its parent has not heard of (nor taken as a result), and one for all its background
    `subagent` sessions that ended since it last heard (a cancelled one is marked heard of,
    and not told)."""
    updates = []
    for ref in await store.get_sub_session_refs(session_id):
        if ref.completion_delivered:
            continue
        if ref.mode == "persistent" and ref.status in NOTICE_STATUSES:
            news.messages.append(SystemMessage(content=await notice(store, ref)))
        elif ref.mode == "background" and ref.status in BACKGROUND_ENDS:
            updates.append(await update(store, ref))
        else:
            continue
        delivered = ref.replaced({"completion_delivered": True})
        news.batch.refs.append(RefUpsert(session_id, delivered))
    text = notice_text(updates)
    if text is not None:
        news.messages.append(SystemMessage(content=text))


async def update(store: StateStore, ref: SubSessionRef) -> Update:
    """A background session's end, for its parent's notice."""
    child = await store.get_session(ref.sub_session_id)
    output = child.output
    summary = isinstance(output, str) and parse_envelope(output) is not None
    return Update(ref.sub_session_id, lifecycle(child), child.error, has_summary=summary)


async def notice(store: StateStore, ref: SubSessionRef) -> str:
    """What the parent's model reads of a child's end."""
    who = f"Persistent child {ref.name!r} ({ref.agent_type}, session {ref.sub_session_id})"
    try:
        child = await store.get_session(ref.sub_session_id)
    except SessionNotFoundError:
        return f"{who} ended {ref.status}."
    if child.status == "completed":
        return f"{who} completed. Its output: {to_json_text(child.output)}"
    return f"{who} {child.status}: {child.error or 'no error was given'}"


def to_json_text(value: object) -> str:
    """`value` as compact JSON text."""
    return json.dumps(to_json(value), ensure_ascii=False, separators=(",", ":"))


async def inbox(store: StateStore, session_id: str, news: News) -> None:
    """Add to `news` the messages queued for the session, as user messages, taken."""
    queued = await store.read_inbox(session_id)
    if queued:
        news.messages += [UserMessage(content=message.content) for message in queued]
        news.batch.inbox_taken.append(InboxTake(session_id, queued[-1].id))
