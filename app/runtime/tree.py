"""A root's stream as this process runs it (`Tree`): the one writer of the stream, the lease of
the whole tree, and every session of it that runs here.

Every session of a tree writes the root's stream, and sequences are given by the writer: so a
tree is run by one process at a time, the one holding the lease of its root session. The lease
is the tree's: taken when the root starts (or is resumed, or taken over), renewed while any
session of the tree runs here, and given up by the write that ends the last of them. See
docs/architecture.md, "Trees and leases".
"""

from __future__ import annotations

import asyncio
import logging
from time import monotonic
from typing import TYPE_CHECKING, Protocol

from app.errors import AgentServerError, ConflictError, NotFoundError, StoreRefusedError
from app.protocol import ErrorChunk, Message, SessionStatus, SubSessionRef
from app.runtime.emitter import StreamWriter
from app.runtime.outcome import SHUTDOWN, Outcome, Stop
from app.runtime.session import SessionRun
from app.runtime.session_state import Resumed
from app.runtime.stale import Leftovers, read_stale
from app.runtime.subtree import close_subtree
from app.store import SessionRecord, StateStore, StreamUpdate, WriteBatch, now_ms

if TYPE_CHECKING:
    from app.agents import AgentConfig, AgentRegistry
    from app.runtime.scheduler import Scheduler

logger = logging.getLogger(__name__)

LEASE_MARGIN = 0.2
"""The part of a lease (at most 2 s) this process does not count on, for clocks that differ."""

REFUSED_WRITE = "The state store refused to save this run's progress; the run cannot go on."
"""The error of a tree whose write the store refused (the store's own words are logged)."""


class TreeHost(Protocol):
    """What a tree needs of the runtime that runs it."""

    @property
    def scheduler(self) -> Scheduler: ...

    @property
    def task_timeout(self) -> float | None: ...

    @property
    def store(self) -> StateStore: ...

    @property
    def registry(self) -> AgentRegistry: ...

    @property
    def owner_id(self) -> str: ...

    @property
    def lease_ms(self) -> int: ...

    def forget(self, tree: Tree) -> None:
        """The tree no longer runs here."""

    def track(self, task: asyncio.Task[Outcome]) -> None:
        """A run of the tree started in a task of its own: the runtime waits for it on close."""


LEFT_FOR_A_RESUME: tuple[SessionStatus, ...] = ("paused_awaiting_client", "interrupted")
"""The ends of a child running on its own (not inside a call of its parent's) that leave its
tree's stream so once the root's turn has completed, in order of precedence."""


class Tree:
    """One root's stream as this process runs it (see the module docstring)."""

    def __init__(
        self,
        host: TreeHost,
        root_id: str,
        writer: StreamWriter,
        *,
        leased_at: float,
        root_status: SessionStatus = "running",
    ) -> None:
        self._host = host
        self.root_id = root_id
        self.writer = writer
        self.root_status: SessionStatus = root_status
        """The root session's status, as its last run here ended it."""
        self._runs: dict[str, SessionRun] = {}
        self._resumed: dict[str, Resumed] = {}
        self._watchers: dict[str, list[asyncio.Future[None]]] = {}
        self._left: SessionStatus | None = None
        """How a session other than the root ended that a resume must finish (one of
        `LEFT_FOR_A_RESUME`, the first there if several), since the tree last ended."""
        self._tops = 0
        """Runs of the tree started on their own here (the root's, say), not yet done."""
        self._started = False
        """Whether a run of the tree was started on its own here."""
        self.reopening = False
        """Set while the tree's runs are being started again (a takeover, a resume): a run
        that ends meanwhile is not its last, whatever else has started yet."""
        self._lease_until = 0.0
        self.leased(leased_at)
        self._stale: dict[str, Leftovers] = {}
        """For a tree run again: what the stream shows of each session (see `stale`)."""

    @property
    def scheduler(self) -> Scheduler:
        """Grants the tree's background `subagent` sessions their slots."""
        return self._host.scheduler

    @property
    def task_timeout(self) -> float | None:
        """The runtime's default time limit of a `subagent` child."""
        return self._host.task_timeout

    @property
    def store(self) -> StateStore:
        """The state store."""
        return self._host.store

    @property
    def registry(self) -> AgentRegistry:
        """The agents."""
        return self._host.registry

    # -- sessions ------------------------------------------------------------------------------

    def new_run(
        self,
        agent: AgentConfig,
        record: SessionRecord,
        messages: list[Message],
        *,
        ref: SubSessionRef | None = None,
    ) -> SessionRun:
        """A run of a session of this tree, registered: the tree's stops reach it from now. It
        takes up what a resume of a paused tree left for it."""
        resumed = self._resumed.pop(record.session_id, None)
        run = SessionRun(self, agent, record, messages, ref=ref, resumed=resumed)
        self._runs[record.session_id] = run
        return run

    async def read_stale(self) -> None:
        """Before the tree runs again (a takeover, a resume): note what its stream shows that
        its sessions never committed (see `stale`)."""
        self._stale = await read_stale(self.store, self.root_id)

    def take_stale(self, session_id: str) -> Leftovers | None:
        """What the stream shows of the session that was never committed (given once)."""
        return self._stale.pop(session_id, None) if self._stale else None

    def resume(self, resumed: dict[str, Resumed]) -> None:
        """What a resume of the paused tree leaves each session for its next run."""
        self._resumed.update(resumed)

    def find(self, session_id: str) -> SessionRun | None:
        """The running session of this id, if it runs here."""
        return self._runs.get(session_id)

    @property
    def running(self) -> bool:
        """Whether any session of the tree runs here."""
        return bool(self._runs)

    def ended(self, run: SessionRun) -> None:
        """The run has stopped running."""
        if self._runs.get(run.session_id) is run:
            del self._runs[run.session_id]
        for watcher in self._watchers.pop(run.session_id, ()):
            if not watcher.done():
                watcher.set_result(None)
        if self._started and self._idle():
            self._host.forget(self)  # the last run of a tree whose top runs are all done

    def finished(self, session_id: str) -> asyncio.Future[None]:
        """A future done once the session's run here has stopped (at once if none runs)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if session_id in self._runs:
            self._watchers.setdefault(session_id, []).append(future)
        else:
            future.set_result(None)
        return future

    def close(self, run: SessionRun, outcome: Outcome, batch: WriteBatch) -> bool:
        """Add to `batch` (the end of `run`) what ends the tree when `run` is its last running
        session here: the stream's status (the root's) and the lease given up. Whether it did."""
        if run.session_id == self.root_id:
            self.root_status = outcome.status
        elif (
            run.frame is not None
            and outcome.status in LEFT_FOR_A_RESUME
            and (
                self._left is None
                or LEFT_FOR_A_RESUME.index(outcome.status) < LEFT_FOR_A_RESUME.index(self._left)
            )
        ):
            self._left = outcome.status
        runs = self._runs
        if self.reopening or len(runs) > 1 or (runs and run.session_id not in runs):
            return False
        # A tree whose root's turn is over ends as its children running on their own do: one
        # paused for the client or interrupted leaves the stream so, for a resume to finish it.
        status = self.root_status
        if self._left is not None and status == "completed":
            status = self._left
        self._left = None
        batch.streams.append(StreamUpdate(self.root_id, status))
        batch.release = True
        return True

    def stop_all(self, stop: Stop) -> None:
        """Stop every session of the tree running here."""
        for run in list(self._runs.values()):
            run.stop(stop)

    # -- the lease -----------------------------------------------------------------------------

    def leased(self, asked_at: float) -> None:
        """This process took or renewed the tree's lease with a request sent at `asked_at`
        (monotonic)."""
        # Another server may claim the lease once its own clock says it expired: a margin
        # covers clocks that disagree by a little.
        lease_ms = self._host.lease_ms
        margin = min(lease_ms * LEASE_MARGIN, 2_000) / 1000
        self._lease_until = asked_at + lease_ms / 1000 - margin

    def holds_lease(self) -> bool:
        """Whether this process surely still holds the tree's lease: not after it went
        unrenewed for too long (the process was paused, or the store was out of reach), when
        another server may have taken the tree over."""
        return monotonic() < self._lease_until

    def check_lease(self) -> None:
        """Before a side effect (a model call, a tool, a child): if this process may have lost
        the lease, another server may be doing the same step now, so the tree stops here,
        without another write."""
        if not self.holds_lease():
            self.give_up("its lease ran out before it was renewed")
            raise asyncio.CancelledError

    def give_up(self, why: str) -> None:
        """Stop running the tree here without another write, as if this process had crashed:
        the server that holds (or takes) its lease carries it on."""
        if self._runs:
            logger.warning("Giving session %s up: %s", self.root_id, why)
            self.stop_all(SHUTDOWN)

    # -- top-level runs ------------------------------------------------------------------------

    def start(self, run: SessionRun) -> asyncio.Task[Outcome]:
        """Run `run` (the root's, or a child's that runs on its own: a persistent child in the
        background) in a task of its own."""
        self._tops += 1
        self._started = True
        task = asyncio.get_running_loop().create_task(self._run_top(run))
        task.add_done_callback(_report_abandoned)
        run.task = task
        self._host.track(task)
        return task

    async def _run_top(self, run: SessionRun) -> Outcome:
        try:
            try:
                outcome = await run.run()
            except (StoreRefusedError, ConflictError, NotFoundError) as exc:
                # A write the store refused would be refused again: a takeover would only
                # repeat the run up to it, so the tree ends here. (A write lost to a lost
                # connection is left for a takeover instead, below.)
                outcome = await self._fail(run, exc)
        except BaseException:
            self.writer.discard()
            # Left for a takeover as after a crash: what else of the tree runs here (children
            # whose lives the parent's failure did not end) stops too, without another write,
            # so the tree is given up (its lease too) once they are gone.
            self.stop_all(SHUTDOWN)
            await run.abandon()
            await self.writer.drain()
            raise
        else:
            await self.writer.drain()
            return outcome
        finally:
            self._top_done()

    def _top_done(self) -> None:
        self._tops -= 1
        if self._idle():
            self._host.forget(self)

    def _idle(self) -> bool:
        """Whether nothing of the tree runs here any more: no top run, and no run but those
        registered and never started (a child whose reopening failed after it was registered:
        nothing will ever run or end it)."""
        return not self._tops and all(run.task is None for run in self._runs.values())

    async def _fail(self, run: SessionRun, cause: Exception) -> Outcome:
        """End the tree `failed` after the store refused one of its writes: what runs here
        stops without another write, then one write ends, from what the store holds, the root
        and every descendant still running, with an `error` chunk and the stream's end. If that
        write fails too, or another server holds the tree, the run is left as after a crash
        (the error propagates)."""
        root = self.root_id
        logger.error("Session %s: the store refused a write; the run fails: %r", root, cause)
        self.stop_all(SHUTDOWN)
        await run.abandon()
        self.writer.discard()
        await self.writer.settled()  # the store then shows everything this process wrote
        failure = Outcome("failed", error=REFUSED_WRITE)
        store, owner = self.store, self._host.owner_id
        try:
            if not await store.claim_session(root, owner, self._host.lease_ms):
                raise cause  # another server runs the tree now
            record = await store.get_session(root)
            if record.status != "running":  # another server ended it meanwhile
                await store.release_session(root, owner)
                raise cause
            now = now_ms()
            batch = WriteBatch(
                updated_sessions=[
                    record.evolve(status="failed", error=failure.error, updated_at=now)
                ],
                streams=[StreamUpdate(root, "failed")],
                release=True,
            )
            await close_subtree(store, self.registry, record, failure, batch, now)
            last = (await store.get_stream(root)).last_sequence
            writer = StreamWriter(
                store, root, last, flush_delay=self.writer.flush_delay, fence=(root, owner)
            )
            fields = {"error": failure.error}
            writer.emit(ErrorChunk, root, record.agent_type, record.step_count, fields)
            await writer.commit(batch)
        except AgentServerError as exc:
            logger.error("Session %s: could not record its failure (%s)", root, exc)
            raise cause from exc
        return failure


def _report_abandoned(task: asyncio.Task[Outcome]) -> None:
    """Log a run given up here without an end (a lost write, a lost lease): whoever holds or
    takes its lease carries it on. (A caller awaiting its handle gets the error too.)"""
    if task.cancelled():
        return
    error = task.exception()
    if error is not None:
        logger.warning("A run was given up here and is left for a takeover: %r", error)
