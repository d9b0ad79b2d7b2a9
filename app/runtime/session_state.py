"""The vocabulary of a session's run: where it is (`Phase`), what a step still has to answer
(`Pending`), what a resume of its paused tree leaves it (`Resumed`), and what it needs of the
tree it runs in (`SessionTree`). The run itself is `session.SessionRun`.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from app.agents import AgentConfig
from app.protocol import AssistantMessage, Message, SubSessionRef, ToolCall
from app.runtime.child_kinds import TreeServices
from app.runtime.outcome import Outcome
from app.runtime.stale import Leftovers
from app.store import SessionRecord, WriteBatch

if TYPE_CHECKING:
    from app.runtime.session import SessionRun


class Phase(enum.Enum):
    """Where a session's run is; a stop acts on it accordingly."""

    READY = "ready"
    """Made, not started: it stops as soon as it starts."""
    WORKING = "working"
    """In a model call or its tools: a stop cancels them at once."""
    COMMITTING = "committing"
    """Waiting for a step's write to land: a stop takes effect once it has (so the run's view
    of its conversation stays the store's)."""
    ENDING = "ending"
    """Writing its end: too late for a stop."""
    ENDED = "ended"


class SessionTree(TreeServices, Protocol):
    """What a session needs of the tree it runs in, beyond what every session shares."""

    def new_run(
        self,
        agent: AgentConfig,
        record: SessionRecord,
        messages: list[Message],
        *,
        ref: SubSessionRef | None = None,
    ) -> SessionRun:
        """A run of a session of the tree, registered with it."""

    def ended(self, run: SessionRun) -> None:
        """The run has stopped running."""

    def find(self, session_id: str) -> SessionRun | None:
        """The run of the session in the tree here, if any."""

    def finished(self, session_id: str) -> asyncio.Future[None]:
        """Done once the session's run here has stopped (at once if none runs)."""

    def start(self, run: SessionRun) -> asyncio.Task[Outcome]:
        """Run `run` on its own, in a task of its own."""

    def close(self, run: SessionRun, outcome: Outcome, batch: WriteBatch) -> bool:
        """Add to `batch`, the end of `run`, what ends the tree when it is the tree's last run
        here (the stream's status, the lease given up); whether it did."""

    def take_stale(self, session_id: str) -> Leftovers | None:
        """What the stream shows of the session that was never committed (given once; see
        `stale`)."""


@dataclass(frozen=True, slots=True)
class Pending:
    """The calls a step still has to answer."""

    calls: Sequence[ToolCall] = ()
    unstored: AssistantMessage | None = None
    """Their response, when it has not been written: it is written with their results, or
    dropped with the step if the run stops first."""
    new: bool = False
    """Whether they come from a model call of this run (so no child of theirs exists yet)."""


NOTHING = Pending()
"""No call to answer: the next step is a model call."""


@dataclass(frozen=True, slots=True)
class Resumed:
    """What the resume of a paused tree leaves a session of it."""

    approved: frozenset[str] = frozenset()
    """Calls needing approval that the client approved: they may run now."""
    open_calls: frozenset[str] = frozenset()
    """Calls whose `tool_start` the stream already has, with no `tool_end` yet (they waited
    for the client, themselves or through a child): they are not announced again."""


RESUMED_NOTHING = Resumed()
