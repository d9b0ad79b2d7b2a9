"""`Host`: the trees this process runs, for its `AgentRuntime`.

It opens a tree under its lease (with the writer of its stream), launches and reopens the
tree's runs, keeps the tasks they run in, renews the leases of its trees, takes over orphaned
trees (a running session whose owner is gone) and turns the interrupts it hears of into stops
of what runs here. `AgentRuntime` is the public face: it decides what a start or a resume
means (a resume in app/runtime/resuming.py), and asks its host to run it. See
docs/architecture.md, "Trees and leases".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from time import monotonic
from typing import TYPE_CHECKING, Any

from app import observability
from app.agents import AgentConfig, AgentRegistry
from app.backoff import backoff_delay
from app.errors import StoreError, StreamNotFoundError
from app.protocol import Message, SessionStatus
from app.runtime.background import Background, background_children, restart
from app.runtime.emitter import StreamWriter
from app.runtime.handle import RunHandle
from app.runtime.outcome import SUSPENDED, Outcome, Stop, stopped_outcome
from app.runtime.scheduler import BackgroundSettings, Scheduler
from app.runtime.steps import appended
from app.runtime.subtree import close_subtree
from app.runtime.tree import Tree
from app.runtime.trees import Trees
from app.store import (
    InterruptFlag,
    SessionRecord,
    StateStore,
    StreamUpdate,
    WriteBatch,
    now_ms,
)

if TYPE_CHECKING:
    from app.runtime.runtime import AgentRuntime

logger = logging.getLogger(__name__)

LEFT_OVER = "The process running it stopped after its root's turn had ended"
"""The error of a session found running under a root that had stopped."""


class Host:
    """The trees of one `AgentRuntime` (see the module docstring)."""

    def __init__(
        self,
        runtime: AgentRuntime,
        registry: AgentRegistry,
        store: StateStore,
        *,
        owner_id: str,
        lease_ms: int,
        takeover_interval: float | None,
        flush_delay: float,
        background: BackgroundSettings,
    ) -> None:
        self.runtime = runtime
        self.registry = registry
        self.store = store
        self.owner_id = owner_id
        self.lease_ms = lease_ms
        self.takeover_interval = takeover_interval
        self.flush_delay = flush_delay
        self.task_timeout = background.timeout
        """The runtime's default time limit of a `subagent` child."""
        self.scheduler = Scheduler(store, cap=background.concurrency, poll=background.poll)
        """Grants this process's background `subagent` sessions their slots."""
        self.trees = Trees()
        """Every tree this process runs (or is starting: a tree is never run twice here)."""
        self._tasks: set[asyncio.Task[Any]] = set()
        """The tasks of the runs started here, until they end."""
        self._background: set[asyncio.Task[Any]] = set()
        self._unsettled: dict[str, StreamWriter] = {}
        """By root: the writer of a tree given up here while some of its writes were in
        flight."""
        self._remove_listener: Any = None
        self._remove_queue_listener: Any = None

    # -- lifecycle -----------------------------------------------------------------------------

    async def open(self) -> None:
        """Hear of interrupts and of freed background slots, renew leases, and take over
        orphaned trees: our own from before a restart at once, before anything can start, then
        others as their leases expire."""
        self._remove_listener = self.store.add_interrupt_listener(self.heard_interrupt)
        self._remove_queue_listener = self.store.add_queue_listener(self.scheduler.poke)
        self.spawn(self._renew_leases())
        if self.takeover_interval is not None:
            await self._take_over_orphans_once(own=True)
            self.spawn(self._take_over_orphans())

    async def close(self, shutdown_timeout: float) -> None:
        """Give every tree up (as a crash would) and wait up to `shutdown_timeout` seconds for
        its runs to stop before cancelling what is left."""
        self._remove_listener()
        self._remove_queue_listener()
        self.trees.give_up_all("the runtime closes")
        for task in self._background:
            task.cancel()
        await self.scheduler.close()
        tasks = {*self._tasks, *self._background}
        if not tasks:
            return
        # A run waiting on a store that does not answer must not hold the process.
        done, late = await asyncio.wait(tasks, timeout=shutdown_timeout)
        for task in done:
            if not task.cancelled():
                task.exception()  # retrieved: the run's own end has reported it
        if late:
            logger.warning("%d tasks did not stop in time; cancelling them", len(late))
            for task in late:
                task.cancel()
            await asyncio.wait(late, timeout=1.0)

    def spawn(self, coro: Any) -> None:
        """Run `coro` in the background until the host closes."""
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- trees ---------------------------------------------------------------------------------

    def forget(self, tree: Tree) -> None:
        """The tree no longer runs here."""
        self.trees.forget(tree)
        if tree.writer.unsettled:
            self._unsettled[tree.root_id] = tree.writer

    async def settled(self, root_id: str) -> bool:
        """Whether the writes a run of the tree given up here left in flight have landed or
        failed (waiting a lease's length at most). Our lease fences another server's, not
        our own: a tree read again before they land would be written back over them."""
        writer = self._unsettled.get(root_id)
        if writer is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.lease_ms / 1000):
                    await writer.settled()
            if writer.unsettled:
                return False
            if self._unsettled.get(root_id) is writer:
                del self._unsettled[root_id]
        return True

    def track(self, task: asyncio.Task[Outcome]) -> None:
        """A run started in a task of its own: closing waits for it."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def open_tree(self, root_id: str, last_sequence: int, *, leased_at: float) -> Tree:
        """A tree to run here, with the writer of its stream (fenced by the tree's lease)."""
        writer = StreamWriter(
            self.store,
            root_id,
            last_sequence,
            flush_delay=self.flush_delay,
            fence=(root_id, self.owner_id),
        )
        return self.trees.add(Tree(self, root_id, writer, leased_at=leased_at))

    def launch(
        self,
        tree: Tree,
        agent: AgentConfig,
        record: SessionRecord,
        messages: list[Message],
        *,
        stop: Stop | None = None,
    ) -> RunHandle:
        run = tree.new_run(agent, record, messages)
        if stop is not None:
            run.stop(stop)
        return RunHandle(self.runtime, record.session_id, tree.start(run))

    async def reopen(
        self,
        tree: Tree,
        record: SessionRecord,
        messages: list[Message],
        new_messages: list[Message],
        *,
        stop: Stop | None = None,
        extra: WriteBatch | None = None,
        background: Sequence[Background] = (),
        root: bool = True,
    ) -> RunHandle:
        """Run a stored tree again in `tree` (whose lease this process holds): its `background`
        children, then its root (unless not `root`: the root has finished), after appending
        `new_messages` to the root's conversation (and writing `extra` with it)."""
        try:
            last_sequence = (await self.store.get_stream(record.stream_id)).last_sequence
        except StreamNotFoundError:
            last_sequence = 0
        tree.writer.restart(last_sequence)
        await tree.read_stale()
        tree.root_status = record.status
        batch = extra or WriteBatch()
        if root:
            record = record.evolve(status="running", failure_reason=None, updated_at=now_ms())
            tree.root_status = "running"
            batch.updated_sessions.append(record)
            batch.messages.extend(appended(record.session_id, len(messages), new_messages))
        batch.streams.append(StreamUpdate(record.stream_id, "running"))
        await tree.writer.commit(batch)
        tree.reopening = True
        try:
            tasks = [await restart(tree, child, stop) for child in background]
            if root:
                config = self.registry.get(record.agent_type)
                return self.launch(tree, config, record, messages + new_messages, stop=stop)
        finally:
            tree.reopening = False
        return RunHandle(self.runtime, background[0].record.session_id, tasks[0])

    def heard_interrupt(self, session_id: str) -> None:
        if self._heard_runs(session_id):
            self.spawn(self._apply_interrupt(session_id))

    def _heard_runs(self, session_id: str) -> bool:
        """Whether a session an interrupt was heard for runs in this process."""
        return session_id in self.trees or self.trees.find_run(session_id) is not None

    async def _apply_interrupt(self, session_id: str) -> None:
        # The notification is heard once: a failed read of the flag must not lose the interrupt,
        # so it is read again (with backoff) for as long as the session still runs here.
        attempt = 0
        while True:
            try:
                flag = await self.store.check_interrupt_flag(session_id)
                break
            except StoreError:
                attempt += 1
                if not self._heard_runs(session_id):
                    return
                logger.warning("Checking the interrupt flag of %s failed; again", session_id)
                await asyncio.sleep(backoff_delay(attempt, 0.05, 2.0))
                if not self._heard_runs(session_id):
                    return
        if flag is None:
            return
        stop = Stop("interrupted", flag.reason)
        tree = self.trees.get(session_id)
        if tree is not None:
            tree.stop_all(stop)  # the root's interrupt reaches every session of its tree
            return
        run = self.trees.find_run(session_id)
        if run is not None:
            run.stop(stop)

    # -- leases and takeover ---------------------------------------------------------------

    async def _renew_leases(self) -> None:
        while True:
            await asyncio.sleep(self.lease_ms / 3000)
            await self.trees.renew(self.store, self.owner_id, self.lease_ms)

    async def _take_over_orphans(self) -> None:
        assert self.takeover_interval is not None
        while True:
            await asyncio.sleep(self.takeover_interval)
            await self._take_over_orphans_once(own=False)

    async def _take_over_orphans_once(self, *, own: bool) -> None:
        try:
            orphans = await self.store.orphaned_trees(owner_id=self.owner_id if own else None)
            for record in orphans:
                await self.take_over(record.session_id)
        except Exception:
            logger.exception("Taking over orphaned sessions failed")

    async def _end_leftovers(self, record: SessionRecord) -> None:
        """Give up the lease of a tree with nothing to run again. If a process died while
        children still ran after their root's turn was over (stopping as it paused, say),
        they end as that stop would have ended them, and the stream with the root's status."""
        session_id = record.session_id
        try:
            ended = (await self.store.get_stream(record.stream_id)).status != "running"
        except StreamNotFoundError:
            ended = True
        if ended or not record.is_root:
            await self.store.release_session(session_id, self.owner_id)
            return
        batch = WriteBatch(fence=(session_id, self.owner_id), release=True)
        if record.status == "paused_awaiting_client":
            outcome = stopped_outcome(SUSPENDED)
        else:
            outcome = Outcome("failed", error=LEFT_OVER)
        await close_subtree(self.store, self.registry, record, outcome, batch, now_ms())
        batch.streams.append(StreamUpdate(record.stream_id, record.status))
        logger.info("Session %s: ending what a dead process left running", session_id)
        await self.store.commit(batch)

    async def take_over(self, session_id: str) -> RunHandle | None:
        """Run a tree whose server is gone again, from its root's last committed step; None if
        another process holds it (or it runs here, or has nothing running).

        An interrupt requested while it had no owner is honoured: it stops at once.
        """
        if session_id in self.trees or not await self.settled(session_id):
            return None
        tree = self.open_tree(session_id, 0, leased_at=monotonic())
        flag: InterruptFlag | None = None
        try:
            if not await self.store.claim_session(session_id, self.owner_id, self.lease_ms):
                self.trees.forget(tree)
                return None
            record = await self.store.get_session(session_id)
            running: frozenset[SessionStatus] = frozenset({"running", "queued"})
            background = (
                await background_children(self.store, self.registry, session_id, running)
                if record.is_root
                else []
            )
            root = record.is_root and record.status == "running"
            if not (root or background):
                await self._end_leftovers(record)
                self.trees.forget(tree)
                return None
            logger.info("Taking over session %s", session_id)
            observability.takeover(session_id)
            messages = await self.store.load_messages(session_id) if root else []
            flag = await self.store.check_interrupt_flag(session_id)
            stop = None if flag is None else Stop("interrupted", flag.reason)
            return await self.reopen(
                tree, record, messages, [], stop=stop, background=background, root=root
            )
        except BaseException:
            self.forget(tree)  # what reopening wrote may still be in flight
            if flag is not None:
                # Reading the flag cleared it: the next takeover must still hear it.
                await self._raise_again(session_id, flag.reason)
            raise

    async def _raise_again(self, session_id: str, reason: str | None) -> None:
        try:
            await self.store.set_interrupt_flag(session_id, reason)
        except StoreError:
            logger.warning("Session %s: an interrupt read by a failed takeover is lost", session_id)
