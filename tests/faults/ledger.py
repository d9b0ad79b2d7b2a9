"""One ordered record of what a scenario did: the calls its models and tools made, and the writes
that landed, so "no model or tool call whose result was committed ran again" can be decided
exactly, whatever the interleaving.

A model call is keyed by its session and the index its response takes in the conversation
(`len(request.messages)`); a tool call by its session, the index of the response that asked for
it and its position in that response. The writes that land tell which of those keys are
committed, and when; a conversation cleared (a child started again from scratch) forgets them.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from app.protocol import AssistantMessage, Message, ToolMessage
from app.store import WriteBatch

CallKind = Literal["model", "tool"]


@dataclass(frozen=True, slots=True)
class CallKey:
    """A model call (`position` is None) or a tool call (`position` in its response)."""

    session_id: str
    index: int
    """The conversation index of the model's response."""
    position: int | None = None

    @property
    def kind(self) -> CallKind:
        """Which kind of call."""
        return "model" if self.position is None else "tool"

    def __str__(self) -> str:
        where = "" if self.position is None else f".{self.position}"
        return f"{self.kind} {self.session_id}@{self.index}{where}"


@dataclass(frozen=True, slots=True)
class CallEvent:
    """A call started."""

    tick: int
    node: str
    key: CallKey


@dataclass(frozen=True, slots=True)
class RepeatedCall:
    """A call started after its result had been committed."""

    key: CallKey
    committed_at: int
    repeated_by: str
    """The node that ran it again."""

    def __str__(self) -> str:
        return f"{self.key} ran again on node {self.repeated_by} after its result was committed"


@dataclass
class _Conversation:
    messages: dict[int, Message] = field(default_factory=dict)


class Ledger:
    """The calls and committed writes of one scenario, in one order (a shared tick)."""

    def __init__(self) -> None:
        self._ticks = itertools.count(1)
        self.calls: list[CallEvent] = []
        self.history: list[tuple[int, CallKey | str]] = []
        """Every commit of a key (a `CallKey`) and clear of a conversation (its session id)."""
        self._conversations: dict[str, _Conversation] = {}
        self._attempts: Counter[CallKey] = Counter()
        self._since_heal: Counter[CallKey] | None = None
        self.landed_writes = 0
        self.last_activity = time.monotonic()
        self.notes: list[str] = []
        """Things worth telling a reader that are not violations by themselves."""

    def tick(self) -> int:
        """The next point in the scenario's order (and a sign of life)."""
        self.last_activity = time.monotonic()
        return next(self._ticks)

    def call(self, node: str, key: CallKey) -> int:
        """Record that a call starts; returns how many times the key started before."""
        before = self._attempts[key]
        self._attempts[key] += 1
        if self._since_heal is not None:
            self._since_heal[key] += 1
        self.calls.append(CallEvent(self.tick(), node, key))
        return before

    def healed(self) -> None:
        """The faults healed: count attempts afresh (see `most_attempts_since_heal`)."""
        if self._since_heal is None:
            self._since_heal = Counter()
        self.tick()  # recovery starts now: idleness counts from here

    def most_attempts_since_heal(self) -> tuple[CallKey | None, int]:
        """The key started most often since the faults healed, and how often: with nothing
        failing any more, a call that keeps starting again means a run going round in circles."""
        if not self._since_heal:
            return None, 0
        return self._since_heal.most_common(1)[0]

    def landed(self, batch: WriteBatch) -> None:
        """Record a write that landed: its conversations' new messages commit call keys."""
        tick = self.tick()
        self.landed_writes += 1
        # A child started again from scratch clears its conversation and deletes its old
        # subtree (`deleted_sessions`): a session made again under one of those ids is new.
        for session_id in [*batch.cleared_messages, *batch.deleted_sessions]:
            self._conversations[session_id] = _Conversation()
            self.history.append((tick, session_id))
        for append in batch.messages:
            conversation = self._conversations.setdefault(append.session_id, _Conversation())
            conversation.messages[append.index] = append.message
            for key in self._keys_of(append.session_id, append.index, append.message):
                self.history.append((tick, key))

    def _keys_of(self, session_id: str, index: int, message: Message) -> Iterable[CallKey]:
        if isinstance(message, AssistantMessage):
            yield CallKey(session_id, index)
            return
        if not isinstance(message, ToolMessage):
            return
        messages = self._conversations[session_id].messages
        at = next(
            (i for i in range(index - 1, -1, -1) if isinstance(messages.get(i), AssistantMessage)),
            None,
        )
        if at is None:
            return
        response = messages[at]
        assert isinstance(response, AssistantMessage)
        # The k-th answer with an id answers the k-th call with it (ids may repeat).
        earlier = 0
        for between in range(at + 1, index):
            answer = messages.get(between)
            if isinstance(answer, ToolMessage) and answer.tool_call_id == message.tool_call_id:
                earlier += 1
        positions = [
            position
            for position, call in enumerate(response.tool_calls)
            if call.id == message.tool_call_id
        ]
        if earlier < len(positions):
            yield CallKey(session_id, at, positions[earlier])

    def repeated(self) -> list[RepeatedCall]:
        """Calls that started after their result was committed (and not cleared since)."""
        found: list[RepeatedCall] = []
        landed_at: dict[CallKey, int] = {}
        merged: list[tuple[int, CallKey | str | CallEvent]] = [*self.history]
        merged += [(event.tick, event) for event in self.calls]
        merged.sort(key=lambda item: item[0])
        for tick, item in merged:
            if isinstance(item, str):
                for key in [k for k in landed_at if k.session_id == item]:
                    del landed_at[key]
            elif isinstance(item, CallKey):
                landed_at.setdefault(item, tick)
            else:
                when = landed_at.get(item.key)
                if when is not None:
                    found.append(RepeatedCall(item.key, when, item.node))
        return found
