"""The interfaces between a session's `Children` and the kinds of child that plug into it: what
a kind implements (`Delegation`, and `Prepared` for a child stored with the response that asks
for it), what it is given of its parent and tree (`Parent`, `TreeServices`), and what a parent
holds of a child (`Run`, `Child`). Apart from `app.runtime.children`, which keeps the children.

See docs/architecture.md, "Children".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, JsonValue

from app.protocol import BaseChunk, SubSessionRef
from app.runtime.outcome import Outcome, Stop
from app.store import SessionRecord, WriteBatch

if TYPE_CHECKING:
    from app.agents import AgentConfig, AgentRegistry, HookContext
    from app.protocol import Message
    from app.runtime.children import Children, Frame
    from app.runtime.emitter import StreamWriter
    from app.runtime.scheduler import Scheduler
    from app.runtime.tasks import Lane
    from app.store import StateStore


class Run(Protocol):
    """A session's run as its parent holds it."""

    frame: Frame | None
    """Set for a run on its own (not inside its parent's call): what its end closes."""
    inbox_due: bool
    """Set when a message was queued for it: it reads its inbox before its next model call."""
    lane: Lane | None
    """Set for a background `subagent` session: its place in the queue."""

    @property
    def ending(self) -> bool:
        """Whether it is past reading anything more (writing its end, or ended)."""

    def stop(self, stop: Stop) -> None:
        """Stop it and its children (idempotent)."""

    async def run(self) -> Outcome:
        """Run it to an outcome, committed."""


class Child(Protocol):
    """A running child a parent can stop: a local child's run, or a remote one's copier."""

    def stop(self, stop: Stop) -> None:
        """Stop it (idempotent)."""


class TreeServices(Protocol):
    """What every session of a tree shares: the store, the agents, the stream's writer, and the
    lease of the tree."""

    @property
    def store(self) -> StateStore: ...

    @property
    def registry(self) -> AgentRegistry: ...

    @property
    def writer(self) -> StreamWriter: ...

    @property
    def scheduler(self) -> Scheduler:
        """Grants the tree's background `subagent` sessions their slots."""

    @property
    def task_timeout(self) -> float | None:
        """The runtime's default time limit of a `subagent` child."""

    def check_lease(self) -> None:
        """Raise (giving the tree up) if this process may no longer hold the tree's lease."""


class Parent(Protocol):
    """What a child needs of the session it belongs to."""

    @property
    def session_id(self) -> str: ...

    @property
    def record(self) -> SessionRecord: ...

    @property
    def agent(self) -> AgentConfig: ...

    @property
    def tree(self) -> TreeServices: ...

    def emit(self, chunk_type: type[BaseChunk], **fields: Any) -> None:
        """Emit a chunk from the parent into the tree's stream."""

    def hook_context(self) -> HookContext:
        """The parent, for its hooks."""

    def child_run(
        self,
        agent: AgentConfig,
        record: SessionRecord,
        messages: list[Message],
        ref: SubSessionRef,
    ) -> Run:
        """The run of a local child of the parent, ready to start."""


class Prepared(Protocol):
    """A child made ready to be stored with the response that starts it (one write for both)."""

    @property
    def record(self) -> SessionRecord: ...

    @property
    def ref(self) -> SubSessionRef: ...

    def add_to(self, batch: WriteBatch) -> None:
        """Write the child in `batch`."""

    def start(self, parent: Parent) -> Run:
        """Its run, once it is stored."""


class Delegation(Protocol):
    """A kind of child: how a tool call becomes a child session and, in the end, an outcome."""

    @property
    def input_schema(self) -> type[BaseModel]:
        """What the call's arguments must be."""

    @property
    def outside(self) -> bool:
        """Whether the child lives outside this process's store (on a remote server): the
        response that asks for it must have landed before it is told."""

    def agent_type_of(self, child_input: dict[str, JsonValue]) -> str:
        """The agent type of the child a call with these arguments starts."""

    def child_id(self, parent_id: str, call_id: str) -> str:
        """The child's deterministic session id."""

    def prepare(
        self, parent: Parent, call_id: str, child_id: str, child_input: dict[str, JsonValue]
    ) -> Prepared | None:
        """The child to store with the response that asks for it, if this kind is stored so."""

    async def live(
        self,
        children: Children,
        call_id: str,
        child_id: str,
        child_input: dict[str, JsonValue],
        new: bool,
    ) -> Outcome:
        """The child's whole life: found again, started or reopened, run, and its outcome.
        `new`: the call comes from a model call of this run, so no session of it exists."""
