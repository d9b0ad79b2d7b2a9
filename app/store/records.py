"""The records a `StateStore` keeps and the `WriteBatch` that changes them, as plain data."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import JsonValue

from app.protocol import Chunk, Message, SessionStatus, SubSessionRef
from app.store.queue import QueueEntry, QueueMove


@dataclass(frozen=True)
class SessionRecord:
    """A session as stored. Runs replace it whole through `WriteBatch.updated_sessions`.

    `owner_id` and `lease_expires_at` are written on creation and afterwards by the lease methods
    (and a batch's `release`), never by an update's values, so a lease renewal and a step commit
    cannot overwrite each other. A root session's lease is its tree's (see docs/architecture.md).
    Treat `state` and the JSON fields as immutable once the record is committed.
    """

    session_id: str
    agent_type: str
    stream_id: str
    """The stream the session writes to: its own id for a root, the root's id for a local child."""
    status: SessionStatus
    created_at: int
    updated_at: int
    parent_session_id: str | None = None
    step_count: int = 0
    """Steps taken in the current turn (what `max_steps` bounds)."""
    state: dict[str, Any] = field(default_factory=dict)
    """The agent's custom state (its `state_schema`, dumped to JSON)."""
    input: JsonValue = None
    """The input the session was started with."""
    output: JsonValue = None
    error: str | None = None
    failure_reason: str | None = None
    idempotency_key: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    owner_id: str | None = None
    lease_expires_at: int | None = None
    request_fingerprint: str | None = None
    """A digest of the request that created the session, kept with its `idempotency_key`: a
    request that repeats the key with another body is refused, not answered with this session."""

    def evolve(self, **changes: Any) -> SessionRecord:
        """A copy with `changes` applied: `dataclasses.replace`, several times faster (which is
        why the record keeps a `__dict__`: copying one costs a third of setting each slot)."""
        values = {**self.__dict__, **changes}
        if len(values) != len(self.__dict__):
            raise TypeError(f"SessionRecord has no field {sorted(values.keys() - self.__dict__)}")
        new = _new_object(SessionRecord)
        _set_attribute(new, "__dict__", values)
        return new

    @property
    def is_root(self) -> bool:
        """Whether the session owns its stream (it is not a local sub-agent)."""
        return self.stream_id == self.session_id


_new_object = object.__new__
_set_attribute = object.__setattr__


@dataclass(frozen=True, slots=True)
class MessageAppend:
    """One message appended to a session's conversation at position `index` (0-based)."""

    session_id: str
    index: int
    message: Message


@dataclass(frozen=True, slots=True)
class RefUpsert:
    """A sub-session reference to insert or replace, keyed by parent and sub-session id."""

    parent_session_id: str
    ref: SubSessionRef


@dataclass(frozen=True, slots=True)
class ChunkAppend:
    """Chunks appended to a stream; their sequences continue the stream's without a gap."""

    stream_id: str
    chunks: Sequence[Chunk]


@dataclass(frozen=True, slots=True)
class StreamUpdate:
    """A stream's run status: a stream whose status is a stopped one has ended (for now)."""

    stream_id: str
    status: SessionStatus


@dataclass(frozen=True, slots=True)
class InboxAppend:
    """A message queued for a running session (a persistent child told something while it
    runs): it reads it before its next model call."""

    session_id: str
    content: str


@dataclass(frozen=True, slots=True)
class InboxTake:
    """A session took its queued messages up to `through` (an `InboxMessage.id`) into its
    conversation: they leave its inbox."""

    session_id: str
    through: int


@dataclass(frozen=True, slots=True)
class InboxMessage:
    """A message waiting in a session's inbox."""

    id: int
    """Increasing in the order the store took them (over every session)."""
    session_id: str
    content: str
    created_at: int


@dataclass(slots=True)
class WriteBatch:
    """Everything one atomic write changes; applied as deleted sessions, sessions, cleared
    conversations, messages, refs, chunks."""

    deleted_sessions: list[str] = field(default_factory=list)
    """Deleted first, with their conversations, inboxes, queue rows, interrupt flags, their refs
    to children and the refs pointing at them (the subtree of a child started again from
    scratch: it supersedes them). Deleting an unknown id changes nothing. A store applying
    several batches together may apply their deletions first: nothing else in a group writes a
    session it deletes."""

    new_sessions: list[SessionRecord] = field(default_factory=list)
    """Inserted; an existing id fails the whole batch with `SessionExistsError`."""
    updated_sessions: list[SessionRecord] = field(default_factory=list)
    """Replaced (lease fields excepted); a missing id fails it with `SessionNotFoundError`."""
    cleared_messages: list[str] = field(default_factory=list)
    """Sessions whose conversation is deleted before `messages` are appended (a child started
    again from scratch); their next message index is 0."""
    messages: list[MessageAppend] = field(default_factory=list)
    refs: list[RefUpsert] = field(default_factory=list)
    chunks: list[ChunkAppend] = field(default_factory=list)
    streams: list[StreamUpdate] = field(default_factory=list)
    """Upserted: a stream row is created by its first update."""
    inbox: list[InboxAppend] = field(default_factory=list)
    """Queued for their sessions, after `inbox_taken` is applied."""
    inbox_taken: list[InboxTake] = field(default_factory=list)
    """Removed from their sessions' inboxes."""
    enqueued: list[QueueEntry] = field(default_factory=list)
    """Background queue rows inserted, after `dequeued`, with their `seq` assigned by the store
    in list order (the entries' own `seq` is ignored). A session that already has a row keeps
    it, place and state: the entry changes nothing. A session missing from the store and the
    batch fails the batch with `SessionNotFoundError` (as a message for its inbox does)."""
    queue_moves: list[QueueMove] = field(default_factory=list)
    """Queue rows whose state changes, after `enqueued`; unknown ids change nothing."""
    dequeued: list[str] = field(default_factory=list)
    """Queue rows removed, first of the queue's changes; unknown ids change nothing."""
    fence: tuple[str, str] | None = None
    """`(session_id, owner_id)`: the batch lands only if that session's lease is held by that
    owner (a session the batch creates holds what its record says), else it fails whole with
    `LeaseLostError`. A process that was paused past its lease, and whose session another
    server took over, can then write nothing more of it."""
    release: bool = False
    """With `fence`, the batch also gives that lease up (the write that ends a tree's last
    running session)."""

    def stream_ids(self) -> frozenset[str]:
        """The streams the batch writes to: its chunks', its sessions' and its updates'."""
        # Called for every batch a store queues: loops, not generators, cost a third.
        ids = {append.stream_id for append in self.chunks}
        for record in self.new_sessions:
            ids.add(record.stream_id)
        for record in self.updated_sessions:
            ids.add(record.stream_id)
        for update in self.streams:
            ids.add(update.stream_id)
        for entry in self.enqueued:
            ids.add(entry.stream_id)
        return frozenset(ids)

    def is_empty(self) -> bool:
        """Whether the batch changes nothing."""
        return not (
            self.deleted_sessions
            or self.new_sessions
            or self.updated_sessions
            or self.cleared_messages
            or self.messages
            or self.refs
            or self.chunks
            or self.streams
            or self.inbox
            or self.inbox_taken
            or self.enqueued
            or self.queue_moves
            or self.dequeued
        )

    def changes_queue(self) -> bool:
        """Whether the batch changes the background queue (deleting sessions may)."""
        return bool(self.enqueued or self.queue_moves or self.dequeued or self.deleted_sessions)

    def may_free_slot(self) -> bool:
        """Whether the batch may free a slot of the background queue (or a place at its head):
        it removes or moves rows, or deletes sessions. Only inserting rows never does."""
        return bool(self.queue_moves or self.dequeued or self.deleted_sessions)


@dataclass(frozen=True, slots=True)
class StreamState:
    """How far a stream has got, and whether its run has stopped."""

    stream_id: str
    last_sequence: int
    status: SessionStatus


@dataclass(frozen=True, slots=True)
class SessionCursor:
    """A position in the newest-first listing of sessions (`StateStore.list_sessions`)."""

    created_at: int
    session_id: str

    @classmethod
    def after(cls, record: SessionRecord) -> SessionCursor:
        """The position just past `record`."""
        return cls(record.created_at, record.session_id)


StoredChunk = tuple[int, str]
"""A chunk as stored: its sequence and its wire JSON (what `chunk_to_json` gives, as text)."""


@dataclass(frozen=True, slots=True)
class StreamPage:
    """Chunks of a stream as stored, and the stream's progress, read at one moment."""

    chunks: list[StoredChunk]
    """Sequence > `after`, in order, at most `limit`: fewer means none followed them then."""
    last_sequence: int
    status: SessionStatus


@dataclass(frozen=True, slots=True)
class InterruptFlag:
    """A pending interrupt request."""

    session_id: str
    reason: str | None
    requested_at: int
