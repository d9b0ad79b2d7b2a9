"""`AgentRuntime`: starts, resumes, interrupts and reports on sessions, in-process.

The HTTP server is a thin layer over it. Every entry point goes through the store, so a runtime can
answer for sessions another process runs: an interrupt is a durable flag that the owning process
hears of (its own flags included) and turns into a stop of the whole tree; a running session whose
owner is gone is taken over and resumed from its last committed step.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, Self

from app.agents import AgentConfig, AgentRegistry
from app.errors import (
    InvalidRequestError,
    LifecycleError,
    SessionNotResumableError,
    SessionRunningError,
    StreamNotFoundError,
)
from app.ids import new_session_id, validate_session_id
from app.protocol import Message, SessionStatus, UserMessage
from app.protocol.api import ApprovalBody, SessionStatusView, ToolResultBody, UsageView
from app.runtime.emitter import StreamWriter
from app.runtime.handle import RunHandle
from app.runtime.inputs import Answers, first_message, json_input
from app.runtime.outcome import Outcome, unanswered_calls
from app.runtime.reader import StreamFollower
from app.runtime.session import SessionRun
from app.store import (
    MemoryStore,
    MessageAppend,
    SessionRecord,
    StateStore,
    StreamUpdate,
    WriteBatch,
    now_ms,
)

logger = logging.getLogger(__name__)


class AgentRuntime:
    """Runs agents in this process against a state store (in-memory unless one is given).

    Use it as an async context manager. `owner_id` names this process in session leases: give a
    restarted server the same id and it resumes its own sessions at once, without waiting for
    their leases to expire.
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
    ) -> None:
        if not isinstance(registry, AgentRegistry):
            raise TypeError("AgentRuntime needs an AgentRegistry")
        self.registry = registry
        self._owns_store = store is None
        self.store: StateStore = store if store is not None else MemoryStore()
        self.owner_id = owner_id or f"runtime-{uuid.uuid4().hex[:12]}"
        self.lease_ms = lease_ms
        self.takeover_interval = takeover_interval
        self.flush_delay = flush_delay
        self.active: dict[str, SessionRun] = {}
        """Every session (root or child) running in this process, by id."""
        self._roots: dict[str, asyncio.Task[Outcome]] = {}
        self._local: set[str] = set()
        """Root sessions this runtime runs or is starting: never taken over or resumed twice."""
        self._background: set[asyncio.Task[Any]] = set()
        self._remove_listener: Any = None
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
        self._remove_listener = self.store.add_interrupt_listener(self._heard_interrupt)
        self._spawn(self._renew_leases())
        if self.takeover_interval is not None:
            # Our own sessions from before a restart are resumed now, before anything can start.
            await self._take_over_orphans_once(own=True)
            self._spawn(self._take_over_orphans())
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
        self._remove_listener()
        runs = list(self.active.values())
        for run in runs:
            if run.parent is None:
                run.stop("shutdown")
        for task in self._background:
            task.cancel()
        tasks = [run.task for run in runs if run.task is not None]
        tasks += [task for run in runs for task in run.child_tasks]
        await asyncio.gather(
            *tasks, *self._roots.values(), *self._background, return_exceptions=True
        )
        if self._owns_store:
            await self.store.__aexit__(None, None, None)

    def _check_open(self) -> None:
        if self._state != "open":
            raise LifecycleError(
                "AgentRuntime is not running: use it as `async with AgentRuntime(...) as runtime`"
            )

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

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
        `text` or `content` field, else its JSON). `input` also seeds the custom state.
        """
        self._check_open()
        config = self.registry.get(agent) if isinstance(agent, str) else agent
        if config.name not in self.registry:
            self.registry.register(config)
        # A generated id and no key: nothing can refuse the creation but a failing store.
        fresh = session_id is None and idempotency_key is None
        session_id = validate_session_id(session_id) if session_id else new_session_id()
        if parent_session_id is not None:
            validate_session_id(parent_session_id)
        input_json = json_input(input)
        message = first_message(message, input_json)
        state = config.initial_state(input_json)
        now = now_ms()
        record = SessionRecord(
            session_id=session_id,
            agent_type=config.name,
            stream_id=session_id,
            status="running",
            created_at=now,
            updated_at=now,
            parent_session_id=parent_session_id,
            state=state if isinstance(state, dict) else state.model_dump(mode="json"),
            input=input_json,
            idempotency_key=idempotency_key,
            owner_id=self.owner_id,
            lease_expires_at=now + self.lease_ms,
        )
        first = UserMessage(content=message)
        with self._starting(session_id):
            created = self.store.submit(
                WriteBatch(
                    new_sessions=[record],
                    messages=[MessageAppend(session_id, 0, first)],
                    streams=[StreamUpdate(session_id, "running")],
                )
            )
            if not fresh or created.done():
                await created
            writer = StreamWriter(self.store, session_id, 0, flush_delay=self.flush_delay)
            writer.follow(created)
            handle = self._launch(config, record, [first], writer)
        if not created.done():
            await self._landed(created, session_id)
        return handle

    async def _landed(self, created: asyncio.Future[None], session_id: str) -> None:
        """Wait for a fresh session's creation, which its run did not wait for (its first model
        call starts meanwhile, and its writes follow the creation); stop the run if it fails.
        Shielded: a caller that goes away leaves the creation to land and the run to go on."""
        run = self._roots[session_id]
        try:
            await asyncio.shield(created)
        except asyncio.CancelledError:
            raise
        except BaseException:
            run.cancel()
            await asyncio.gather(run, return_exceptions=True)
            self._roots.pop(session_id, None)  # a run cancelled before it began never cleans up
            self._local.discard(session_id)
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
        user message (a new turn with a fresh step budget), or answer a paused one: a result for
        each client tool call it waits for and a decision for each call awaiting approval.

        A body that does not fit the session (unknown call ids, missing answers) raises
        `InvalidRequestError` and changes nothing.
        """
        self._check_open()
        answers = Answers.parse(tool_results, approvals)
        record = await self.store.get_session(session_id)
        if not record.is_root:
            raise SessionNotResumableError(
                f"Session {session_id!r} is a sub-agent: resume its root session "
                f"{record.stream_id!r}"
            )
        if session_id in self._local:
            raise SessionRunningError(f"Session {session_id!r} is running")
        with self._starting(session_id):
            return await self._resume(record, message, answers)

    async def _resume(
        self, record: SessionRecord, message: str | None, answers: Answers
    ) -> RunHandle:
        session_id = record.session_id
        messages = await self.store.load_messages(session_id)
        new_messages: list[Message] = []
        approved: frozenset[str] = frozenset()
        if record.status != "paused_awaiting_client" and not answers.empty:
            raise InvalidRequestError(
                f"Session {session_id!r} is {record.status}: it waits for no tool results or "
                "approvals"
            )
        if record.status == "paused_awaiting_client":
            if message is not None:
                raise InvalidRequestError(
                    f"Session {session_id!r} waits for tool results or approvals, not a message"
                )
            agent = self.registry.get(record.agent_type)
            new_messages, approved = answers.apply(agent, unanswered_calls(messages))
        elif record.status in ("completed", "failed", "terminated"):
            if message is None:
                raise SessionNotResumableError(
                    f"Session {session_id!r} is {record.status}: continue it with a new message"
                )
            new_messages.append(UserMessage(content=message))
            record = record.evolve(step_count=0, output=None, error=None)
        elif record.status in ("interrupted", "running"):
            if message is not None:
                raise SessionNotResumableError(
                    f"Session {session_id!r} is {record.status}: it resumes from its checkpoint "
                    "and takes no new message until it has finished"
                )
        else:
            raise SessionNotResumableError(f"Session {session_id!r} is {record.status}")
        if not await self.store.claim_session(session_id, self.owner_id, self.lease_ms):
            raise SessionRunningError(f"Session {session_id!r} is running in another process")
        await self.store.check_interrupt_flag(session_id)
        return await self._reopen(record, messages, new_messages, approved=approved)

    async def _reopen(
        self,
        record: SessionRecord,
        messages: list[Message],
        new_messages: list[Message],
        *,
        interrupt_reason: str | None = None,
        interrupted: bool = False,
        approved: frozenset[str] = frozenset(),
    ) -> RunHandle:
        config = self.registry.get(record.agent_type)
        try:
            last_sequence = (await self.store.get_stream(record.stream_id)).last_sequence
        except StreamNotFoundError:
            last_sequence = 0
        record = record.evolve(status="running", failure_reason=None, updated_at=now_ms())
        await self.store.commit(
            WriteBatch(
                updated_sessions=[record],
                messages=[
                    MessageAppend(record.session_id, len(messages) + offset, message)
                    for offset, message in enumerate(new_messages)
                ],
                streams=[StreamUpdate(record.stream_id, "running")],
            )
        )
        writer = StreamWriter(
            self.store, record.stream_id, last_sequence, flush_delay=self.flush_delay
        )
        handle = self._launch(config, record, messages + new_messages, writer, approved)
        if interrupted:
            self.active[record.session_id].stop("interrupted", interrupt_reason)
        return handle

    @contextlib.contextmanager
    def _starting(self, session_id: str) -> Iterator[None]:
        """Mark a root session as ours while it is being started; unmark it if that fails."""
        self._local.add(session_id)
        try:
            yield
        except BaseException:
            self._local.discard(session_id)
            raise

    def _launch(
        self,
        agent: AgentConfig,
        record: SessionRecord,
        messages: list[Message],
        writer: StreamWriter,
        approved: frozenset[str] = frozenset(),
    ) -> RunHandle:
        run = SessionRun(self, agent, record, messages, writer, approved=approved)
        task = asyncio.get_running_loop().create_task(self._run_root(run))
        run.task = task
        self._roots[record.session_id] = task
        return RunHandle(self, record.session_id, task)

    async def _run_root(self, run: SessionRun) -> Outcome:
        try:
            outcome = await run.run()
        except BaseException:
            run.writer.discard()
            await run.writer.drain()
            raise
        finally:
            self._roots.pop(run.session_id, None)
            self._local.discard(run.session_id)
        # The final commit released the lease (it left `running`).
        await run.writer.drain()
        return outcome

    # -- reading and control -------------------------------------------------------------------

    async def status(self, session_id: str) -> SessionStatusView:
        """The session's status, its children and how far its stream has got."""
        self._check_open()
        record = await self.store.get_session(session_id)
        refs = await self.store.get_sub_session_refs(session_id)
        try:
            last_sequence = (await self.store.get_stream(record.stream_id)).last_sequence
        except StreamNotFoundError:
            last_sequence = 0
        return SessionStatusView(
            session_id=record.session_id,
            agent_type=record.agent_type,
            status=record.status,
            step_count=record.step_count,
            output=record.output,
            error=record.error,
            failure_reason=record.failure_reason,
            stream_id=record.stream_id,
            last_sequence=last_sequence,
            parent_session_id=record.parent_session_id,
            sub_sessions=refs,
            usage=UsageView(input_tokens=record.input_tokens, output_tokens=record.output_tokens),
        )

    async def interrupt(self, session_id: str, reason: str | None = None) -> SessionStatus:
        """Ask the session (and its running children) to stop, wherever it runs.

        Returns the session's status when asked: only a `running` session is interrupted; for any
        other status nothing changes.
        """
        self._check_open()
        record = await self.store.get_session(session_id)
        if record.status != "running":
            return record.status
        await self.store.set_interrupt_flag(session_id, reason)
        return record.status

    def follow(
        self, stream_id: str, *, from_sequence: int = 0, poll: float = 1.0
    ) -> StreamFollower:
        """Follow a stream from the store after `from_sequence` until its run stops; `poll` is
        the longest wait for a wake-up before the store is read again."""
        self._check_open()
        return StreamFollower(self.store, stream_id, after=from_sequence, poll=poll)

    def _heard_interrupt(self, session_id: str) -> None:
        if session_id in self.active:
            self._spawn(self._apply_interrupt(session_id))

    async def _apply_interrupt(self, session_id: str) -> None:
        flag = await self.store.check_interrupt_flag(session_id)
        run = self.active.get(session_id)
        if flag is not None and run is not None:
            run.stop("interrupted", flag.reason)

    # -- leases and takeover -------------------------------------------------------------------

    async def _renew_leases(self) -> None:
        while True:
            await asyncio.sleep(self.lease_ms / 3000)
            roots = list(self._roots)
            if not roots:
                continue
            try:
                held = await self.store.renew_leases(self.owner_id, roots, self.lease_ms)
            except Exception:
                logger.exception("Renewing session leases failed")
                continue
            for session_id in set(roots) - held:
                run = self.active.get(session_id)
                if run is not None and not run.ending:
                    logger.warning("Lost the lease of session %s; stopping it here", session_id)
                    run.stop("shutdown")

    async def _take_over_orphans(self) -> None:
        assert self.takeover_interval is not None
        while True:
            await asyncio.sleep(self.takeover_interval)
            await self._take_over_orphans_once(own=False)

    async def _take_over_orphans_once(self, *, own: bool) -> None:
        try:
            orphans = await self.store.list_orphaned_sessions(
                owner_id=self.owner_id if own else None
            )
            for record in orphans:
                await self.take_over(record.session_id)
        except Exception:
            logger.exception("Taking over orphaned sessions failed")

    async def take_over(self, session_id: str) -> RunHandle | None:
        """Resume a running session whose owner is gone; None if another process holds it.

        An interrupt requested while it had no owner is honoured: it stops at once.
        """
        self._check_open()
        if session_id in self._local:
            return None
        with self._starting(session_id):
            if not await self.store.claim_session(session_id, self.owner_id, self.lease_ms):
                self._local.discard(session_id)
                return None
            record = await self.store.get_session(session_id)
            if record.status != "running" or not record.is_root:
                await self.store.release_session(session_id, self.owner_id)
                self._local.discard(session_id)
                return None
            logger.info("Taking over session %s", session_id)
            flag = await self.store.check_interrupt_flag(session_id)
            messages = await self.store.load_messages(session_id)
            return await self._reopen(
                record,
                messages,
                [],
                interrupted=flag is not None,
                interrupt_reason=flag.reason if flag else None,
            )
