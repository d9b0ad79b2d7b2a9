"""`AgentRuntime`: starts, resumes, interrupts and reports on sessions, in-process.

The HTTP server is a thin layer over it. Every entry point goes through the store, so a runtime can
answer for sessions another process runs: an interrupt is a durable flag that the owning process
hears of (its own flags included) and turns into a stop of the whole tree; a running session whose
owner is gone is taken over and resumed from its last committed step.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping, Sequence
from time import monotonic
from types import TracebackType
from typing import Any, Literal, Self

from app.agents import AgentConfig, AgentRegistry
from app.errors import (
    ConflictError,
    LifecycleError,
    SessionExistsError,
    StreamNotFoundError,
)
from app.protocol import SessionStatus
from app.protocol.api import (
    ApprovalBody,
    SessionStatusView,
    ToolResultBody,
)
from app.protocol.browser import SessionTreeView
from app.protocol.values import clean_text
from app.runtime.handle import RunHandle
from app.runtime.host import Host
from app.runtime.inputs import Answers
from app.runtime.reader import StreamFollower
from app.runtime.resuming import resume_root
from app.runtime.scheduler import BackgroundSettings
from app.runtime.starting import SessionPlan, Started, existing_session, plan_session
from app.runtime.status import session_status, session_status_tree
from app.runtime.tree import Tree
from app.runtime.trees import Trees
from app.store import (
    MemoryStore,
    MessageAppend,
    SessionRecord,
    StateStore,
    StreamUpdate,
    WriteBatch,
)

logger = logging.getLogger(__name__)


class AgentRuntime:
    """Runs agents in this process against a state store (in-memory unless one is given).

    Use it as an async context manager. `owner_id` names this process in session leases: give a
    restarted server the same id and it resumes its own sessions at once, without waiting for
    their leases to expire. See docs/architecture.md for what it owns.
    """

    def __init__(
        self,
        registry: AgentRegistry,
        *,
        store: StateStore | None = None,
        owner_id: str | None = None,
        lease_ms: int = 15_000,
        takeover_interval: float | None = 5.0,
        flush_delay: float = 0.005,
        shutdown_timeout: float = 10.0,
        background: BackgroundSettings | None = None,
    ) -> None:
        if not isinstance(registry, AgentRegistry):
            raise TypeError("AgentRuntime needs an AgentRegistry")
        self.registry = registry
        self._owns_store = store is None
        self.store: StateStore = store if store is not None else MemoryStore()
        self.owner_id = owner_id or f"runtime-{uuid.uuid4().hex[:12]}"
        self.lease_ms = lease_ms
        self.shutdown_timeout = shutdown_timeout
        """Seconds closing waits for the runs it stops before it cancels what is left."""
        self.host = Host(
            self,
            registry,
            self.store,
            owner_id=self.owner_id,
            lease_ms=lease_ms,
            takeover_interval=takeover_interval,
            flush_delay=flush_delay,
            background=background or BackgroundSettings(),
        )
        """The trees this process runs."""
        self._state: Literal["new", "open", "closed"] = "new"

    # -- lifecycle -----------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._state != "new":
            raise LifecycleError("An AgentRuntime can only be entered once")
        if self._owns_store:
            await self.store.__aenter__()
        elif not self.store.is_open:
            raise LifecycleError("Open the store (async with store) before the runtime uses it")
        self._state = "open"
        await self.host.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._state != "open":
            return
        self._state = "closed"
        await self.host.close(self.shutdown_timeout)
        if self._owns_store:
            await self.store.__aexit__(None, None, None)

    def _check_open(self) -> None:
        if self._state != "open":
            raise LifecycleError(
                "AgentRuntime is not running: use it as `async with AgentRuntime(...) as runtime`"
            )

    @property
    def trees(self) -> Trees:
        """Every tree this process runs."""
        return self.host.trees

    async def take_over(self, session_id: str) -> RunHandle | None:
        """Run a tree whose server is gone again, from its root's last committed step; None if
        another process holds it (or it runs here, or has nothing running). An interrupt
        requested while it had no owner is honoured: it stops at once."""
        self._check_open()
        return await self.host.take_over(session_id)

    # -- starting and resuming -----------------------------------------------------------------

    async def execute(
        self,
        agent: AgentConfig | str,
        message: str | None = None,
        *,
        input: Any = None,
        session_id: str | None = None,
        parent_session_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> RunHandle:
        """Start a root session of `agent` and return its handle once the session is stored.
        With no `session_id` or `idempotency_key` given, the run starts while it is stored.

        The first user message is `message`, else derived from `input` (its `message`, `query`,
        `text` or `content` field, else its JSON). `input` must fit the agent's published input
        schema (see `AgentRegistry.input_schema`) and its state schema; it also seeds the custom
        state. A session id or key that is taken raises `SessionExistsError`; `start` answers
        such a request with the session it names instead.
        """
        plan = await self._plan(
            agent, message, input, session_id, parent_session_id, idempotency_key
        )
        return await self._create(plan)

    async def start(
        self,
        agent: AgentConfig | str,
        message: str | None = None,
        *,
        input: Any = None,
        session_id: str | None = None,
        parent_session_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> Started:
        """`execute`, with the idempotency rules of `POST /start`: a repeated `idempotency_key`
        (with the same request) or the `session_id` of a running session answers with that
        session and starts nothing; the key with another request is `IdempotencyKeyReusedError`,
        the id of a stopped session `SessionNotResumableError`."""
        plan = await self._plan(
            agent, message, input, session_id, parent_session_id, idempotency_key
        )
        existing = await existing_session(self.store, plan)
        if existing is not None:
            return Started(existing, None)
        try:
            handle = await self._create(plan)
        except ConflictError:
            # Lost the creation to a concurrent request (its session or key exists, or the
            # database's keys refused ours): answer as if it had come first.
            existing = await existing_session(self.store, plan)
            if existing is None:
                raise
            return Started(existing, None)
        return Started(plan.record, handle)

    async def _plan(
        self,
        agent: AgentConfig | str,
        message: str | None,
        input: Any,
        session_id: str | None,
        parent_session_id: str | None,
        idempotency_key: str | None,
    ) -> SessionPlan:
        self._check_open()
        config = self.registry.get(agent) if isinstance(agent, str) else agent
        if config.name not in self.registry:
            self.registry.register(config)
        return await plan_session(
            self.registry,
            self.store,
            config,
            message,
            input=input,
            session_id=session_id,
            parent_session_id=parent_session_id,
            idempotency_key=idempotency_key,
            owner_id=self.owner_id,
            lease_ms=self.lease_ms,
        )

    async def _create(self, plan: SessionPlan) -> RunHandle:
        record, first = plan.record, plan.first
        session_id = record.session_id
        if session_id in self.trees:
            raise SessionExistsError(f"Session {session_id!r} already exists and runs here")
        tree = self.host.open_tree(session_id, 0, leased_at=monotonic())
        try:
            created = self.store.submit(
                WriteBatch(
                    new_sessions=[record],
                    messages=[MessageAppend(session_id, 0, first)],
                    streams=[StreamUpdate(session_id, "running")],
                )
            )
            if not plan.cannot_conflict or created.done():
                await created
        except BaseException:
            self.trees.forget(tree)
            raise
        tree.writer.follow(created)
        handle = self.host.launch(tree, plan.agent, record, [first])
        if not created.done():
            await self._landed(created, tree, handle)
        return handle

    async def _landed(self, created: asyncio.Future[None], tree: Tree, handle: RunHandle) -> None:
        """Wait for a fresh session's creation, which its run did not wait for (its first model
        call starts meanwhile, and its writes follow the creation); stop the run if it fails.
        Shielded: a caller that goes away leaves the creation to land and the run to go on."""
        try:
            await asyncio.shield(created)
        except asyncio.CancelledError:
            raise
        except BaseException:
            handle.cancel()
            await handle.wait()
            self.trees.forget(tree)  # a run cancelled before it began never cleans up
            raise

    async def resume(
        self,
        session_id: str,
        message: str | None = None,
        *,
        tool_results: Sequence[ToolResultBody | Mapping[str, Any]] | None = None,
        approvals: Sequence[ApprovalBody | Mapping[str, Any]] | None = None,
    ) -> RunHandle:
        """Resume an interrupted session from its checkpoint, continue a finished one with a new
        user message (a new turn with a fresh step budget), or answer a paused tree: a result
        for each client tool call and a decision for each call awaiting approval, wherever in
        the tree it waits (an answer names its session; by default this one).

        A body that does not fit (unknown sessions or calls, missing answers) raises
        `InvalidRequestError` and changes nothing.
        """
        self._check_open()
        answers = Answers.parse(tool_results, approvals)
        return await resume_root(self.host, session_id, message, answers)

    # -- reading and control -------------------------------------------------------------------

    async def status(self, session_id: str) -> SessionStatusView:
        """The session's status, its children, how far its stream has got and, for a paused
        tree, every call it waits for."""
        self._check_open()
        return await session_status(self.store, self.registry, session_id)

    async def status_tree(self, session_id: str, *, depth: int | None = None) -> SessionTreeView:
        """The session's status with its whole tree of sub-sessions (to `depth` levels of
        children, all when None) and the tree's summed usage."""
        self._check_open()
        return await session_status_tree(self.store, self.registry, session_id, depth=depth)

    async def interrupt(self, session_id: str, reason: str | None = None) -> SessionStatus:
        """Ask the session (and its running children) to stop, wherever it runs.

        Returns the session's status when asked: only a `running` session is interrupted; for any
        other status nothing changes.
        """
        self._check_open()
        record = await self.store.get_session(session_id)
        if record.status != "running" and not await self._tree_runs(record):
            return record.status
        await self.store.set_interrupt_flag(
            session_id, None if reason is None else clean_text(reason)
        )
        return "running"

    async def _tree_runs(self, record: SessionRecord) -> bool:
        """Whether a root's tree still runs (its background children) though the root has
        finished."""
        if not record.is_root:
            return False
        try:
            return (await self.store.get_stream(record.stream_id)).status == "running"
        except StreamNotFoundError:
            return False

    def follow(
        self, stream_id: str, *, from_sequence: int = 0, poll: float = 1.0
    ) -> StreamFollower:
        """Follow a stream from the store after `from_sequence` until its run stops; `poll` is
        the longest wait for a wake-up before the store is read again."""
        self._check_open()
        return StreamFollower(self.store, stream_id, after=from_sequence, poll=poll)
