"""Running one in-process scenario: simulated processes (nodes) sharing a store, the scenario's
actions, then healing, settling and the invariant check.

A node is an `AgentRuntime` over its own `FaultyStore`, run in a context of its own (`NODE`),
so every task it makes (runs, lease renewals, takeovers) knows which process it belongs to.
A crash severs the node's store first, so nothing it does afterwards reaches the database, then
closes the runtime, as a SIGKILL leaves things. A freeze stops its store and its models and tools
where they are, as SIGSTOP does.

Scenarios share a database per store kind: every id in a scenario starts with `s<seed>`, and each
node's store lists only its scenario's orphans. The invariants are read from the real store.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from app import AgentRegistry, AgentRuntime
from app.errors import AgentServerError, LifecycleError, StoreError
from app.protocol import STOPPED_STATUSES, ToolPendingChunk
from app.store import MemoryStore, StateStore, create_store
from tests.databases import database_url
from tests.faults.faulty_store import FaultyStore
from tests.faults.invariants import Tree, Violation, check_quiescent, read_all_chunks, read_tree
from tests.faults.ledger import Ledger
from tests.faults.scenario import Action, Scenario
from tests.faults.tree import NODE, Stage, World, build_registry

T = TypeVar("T")
logger = logging.getLogger(__name__)

TAKEOVER_INTERVAL = 0.05
WINDOW = 2.0
"""Longest the faults stay armed, from the root's start."""
SETTLE = 12.0
"""Longest a scenario may take to become quiescent once healed."""
STUCK = 3.0
"""Once healed, a tree in which nothing has moved for this long is stuck."""
LIVELOCK = 6
"""A call started this many times after the faults healed means the run goes round in
circles (a takeover that fails the same way every time)."""
CLOSE = 5.0
"""Longest a node may take to shut down gracefully (SIGTERM's grace period)."""
CLIENT_TIMEOUT = 1.0
"""Longest a client waits for an answer (a hung store read makes a request hang)."""


@dataclass
class Bed:
    """What a batch of scenarios shares on one kind of store: two store instances on one
    database (one per simulated process; the same instance for memory) and one registry."""

    backend: str
    stores: tuple[StateStore, StateStore]
    world: World
    registry: AgentRegistry


@contextlib.asynccontextmanager
async def open_bed(backend: str, folder: Path, *, url: str | None = None) -> AsyncIterator[Bed]:
    """A bed on `backend` ("memory", "sqlite" or "postgres"): a fresh test database, or the
    empty database `url` names."""
    world = World()
    registry = build_registry(world)
    if backend == "memory":
        async with MemoryStore() as memory:
            yield Bed(backend, (memory, memory), world, registry)
        return
    async with contextlib.AsyncExitStack() as stack:
        if url is None:
            url = await stack.enter_async_context(database_url(backend, folder))
        # Migrate in a thread first: the first migration in a process imports enough of
        # SQLAlchemy and Alembic to stall this loop for half a second.
        await asyncio.to_thread(asyncio.run, _migrate(url))
        first = await stack.enter_async_context(create_store(url))
        second = await stack.enter_async_context(create_store(url))
        yield Bed(backend, (first, second), world, registry)


async def _migrate(url: str) -> None:
    async with create_store(url):
        pass


@dataclass
class Report:
    """What one scenario found."""

    seed: int
    backend: str
    description: str
    violations: list[Violation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    injected: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0

    def __str__(self) -> str:
        lines = [f"seed {self.seed} on {self.backend} ({self.seconds:.2f}s): {self.description}"]
        lines += [f"  VIOLATION {v}" for v in self.violations]
        lines += [f"  note: {n}" for n in self.notes[:6]]
        if self.injected:
            lines.append(f"  injected: {dict(sorted(self.injected.items()))}")
        return "\n".join(lines)


class Node:
    """One simulated server process."""

    def __init__(
        self, name: str, owner_id: str, store: FaultyStore, registry: AgentRegistry, lease_ms: int
    ) -> None:
        self.name = name
        self.store = store
        self.context = contextvars.copy_context()
        self.context.run(NODE.set, name)
        self.runtime = AgentRuntime(
            registry,
            store=store,
            owner_id=owner_id,
            lease_ms=lease_ms,
            takeover_interval=TAKEOVER_INTERVAL,
            flush_delay=0.002,
        )
        self.alive = False

    async def run(self, work: Awaitable[T]) -> T:
        """Run `work` inside this node (its tasks inherit the node's context)."""
        coroutine: Coroutine[Any, Any, T] = _wrap(work)
        return await asyncio.get_running_loop().create_task(coroutine, context=self.context)

    async def request(self, work: Awaitable[T]) -> T:
        """Run a client's request in this node; `TimeoutError` if it takes longer than a
        client waits."""
        # Not `asyncio.wait_for`: on Python 3.11 it swallows a cancellation that comes as the
        # request ends, and the client loop cancelled at a scenario's end would go on forever.
        async with asyncio.timeout(CLIENT_TIMEOUT):
            return await self.run(work)

    async def start(self) -> None:
        """Start the runtime (which takes over its own orphans at once)."""
        await self.store.__aenter__()
        await self.run(self.runtime.__aenter__())
        self.alive = True

    async def crash(self) -> bool:
        """Die as by SIGKILL; False if what is left of the runtime would not stop."""
        self.alive = False
        self.store.sever()
        stopped = await self._close()
        await self.store.handed_settled(CLOSE)
        return stopped

    async def stop(self) -> bool:
        """Shut down as by SIGTERM; False if it did not finish within `CLOSE` seconds."""
        self.alive = False
        stopped = await self._close()
        self.store.sever()
        return stopped

    async def _close(self) -> bool:
        closing = asyncio.get_running_loop().create_task(
            _wrap(self.runtime.__aexit__(None, None, None)), context=self.context
        )
        done, _ = await asyncio.wait([closing], timeout=CLOSE)
        if not done:
            self.store.sever()
            done, _ = await asyncio.wait([closing], timeout=CLOSE)
        if done:
            with contextlib.suppress(Exception):
                closing.result()
        else:
            closing.cancel()
        await self.store.__aexit__(None, None, None)
        return closing in done


async def _wrap(work: Awaitable[T]) -> T:
    return await work


class ScenarioRun:
    """One scenario on a bed: nodes, actions, healing, settling and checking."""

    def __init__(self, bed: Bed, scenario: Scenario) -> None:
        self.bed = bed
        self.scenario = scenario
        self.root = scenario.plan.prefix
        self.stage: Stage = bed.world.begin(scenario.plan)
        self.ledger: Ledger = self.stage.ledger
        self.report = Report(scenario.seed, bed.backend, scenario.describe())
        self.nodes: dict[str, Node] = {}
        self.stores: list[FaultyStore] = []
        self.started = False
        self.answers = 0
        self._starting: set[asyncio.Task[None]] = set()
        """Nodes (re)starting: a start may wait for the faults to heal, as a real one would."""

    @property
    def reader(self) -> StateStore:
        """The real store, for the checks."""
        return self.bed.stores[0]

    def _node(self, name: str, owner: str, side: int) -> Node:
        store = FaultyStore(
            self.bed.stores[side],
            self.scenario.faults,
            self.ledger,
            scope=self.root,
            name=name,
        )
        self.stores.append(store)
        node = Node(name, f"{self.root}-{owner}", store, self.bed.registry, self.scenario.lease_ms)
        self.nodes[name] = node
        return node

    async def run(self) -> Report:
        """Run the scenario to its report."""
        started = time.monotonic()
        try:
            await self._run()
        finally:
            self.bed.world.end(self.scenario.plan)
            self.report.seconds = time.monotonic() - started
            self.report.notes += self.ledger.notes
            for store in self.stores:
                self.report.injected.update(store.injected)
        return self.report

    async def _run(self) -> None:
        a = self._node("A", "a", 0)
        await a.start()
        if self.scenario.needs_second_node:
            await self._node("B", "b", 1).start()
        for store in self.stores:
            store.arm()
        await self._start_root(a)
        clients = asyncio.get_running_loop().create_task(self._answer_pauses())
        try:
            if self.started:
                deadline = time.monotonic() + WINDOW
                for action in self.scenario.actions:
                    await self._act(action, deadline)
                await self._until_stopped_or_idle(deadline)
            self._heal()
            if self._starting:
                await asyncio.wait(self._starting, timeout=CLOSE)
            if self.started:
                await self._settle()
        finally:
            clients.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await clients
            self._heal()
            for node in list(self.nodes.values()):
                if node.alive and not await node.stop():
                    self._violate("shutdown_hang", f"node {node.name} did not stop in {CLOSE}s")

    def _heal(self) -> None:
        self.ledger.healed()
        for store in self.stores:
            store.heal()
        self.stage.healed.set()
        for node in self.nodes:
            self.stage.thaw(node)

    def _violate(self, kind: str, detail: str) -> None:
        self.report.violations.append(Violation(kind, detail))

    def _note(self, text: str) -> None:
        self.report.notes.append(text)

    def _live(self, prefer: str = "A") -> Node | None:
        node = self.nodes.get(prefer)
        if node is not None and node.alive:
            return node
        return next((n for n in self.nodes.values() if n.alive), None)

    # -- the client ----------------------------------------------------------------------------

    async def _start_root(self, node: Node) -> None:
        for attempt in range(3):
            try:
                handle = await node.request(
                    node.runtime.execute("root", self.scenario.first_message, session_id=self.root)
                )
            except (StoreError, TimeoutError) as exc:
                self._note(f"start attempt {attempt + 1} failed: {type(exc).__name__} {exc}")
                continue
            except AgentServerError as exc:
                self._note(f"start refused: {type(exc).__name__}: {exc}")
                break
            self.started = True
            asyncio.get_running_loop().create_task(self._watch(handle.result(), "root run"))
            return
        with contextlib.suppress(StoreError):
            self.started = await self._exists()

    async def _exists(self) -> bool:
        return await read_tree(self.reader, self.root) is not None

    async def _watch(self, result: Awaitable[Any], what: str) -> None:
        try:
            await result
        except LifecycleError:
            pass  # its node crashed or stopped
        except Exception as exc:
            # A run whose task raises leaves its session to a takeover: worth knowing.
            self._note(f"{what} raised {type(exc).__name__}: {exc}")

    async def _root_status(self) -> str | None:
        try:
            return (await self.reader.get_session(self.root)).status
        except AgentServerError:
            return None

    async def _until_stopped_or_idle(self, deadline: float) -> None:
        """Until the root stops, nothing has moved for longer than a takeover takes, the run
        goes round in circles, or the deadline."""
        idle = self.scenario.lease_ms / 1000 + 0.1
        while await self._root_status() not in STOPPED_STATUSES:
            now = time.monotonic()
            if now - self.ledger.last_activity > idle or now > deadline:
                return
            await asyncio.sleep(0.01)

    async def _answer_pauses(self) -> None:
        """Answer the root's client-tool calls whenever it pauses (twice at most)."""
        answered_after = 0
        while self.answers < 2:
            await asyncio.sleep(0.01)
            if await self._root_status() != "paused_awaiting_client":
                continue
            chunks = await read_all_chunks(self.reader, self.root)
            pending = list(
                dict.fromkeys(
                    c.tool_call_id
                    for c in chunks[answered_after:]
                    if isinstance(c, ToolPendingChunk) and c.agent_id == self.root
                )
            )
            node = self._live()
            if node is None:
                return
            # Counted once the request is over: until then the settling waits, as the resume
            # may be landing while it reads the tree.
            try:
                handle = await node.request(
                    node.runtime.resume(
                        self.root,
                        tool_results=[{"toolCallId": i, "result": "yes"} for i in pending],
                    )
                )
            except (AgentServerError, TimeoutError) as exc:
                self._note(f"answering {pending} failed: {type(exc).__name__}: {exc}")
                continue
            finally:
                self.answers += 1
            answered_after = len(chunks)
            asyncio.get_running_loop().create_task(self._watch(handle.result(), "answered run"))

    # -- actions -------------------------------------------------------------------------------

    async def _act(self, action: Action, deadline: float) -> None:
        while len(self.ledger.calls) < action.after_calls:
            if await self._root_status() in STOPPED_STATUSES or time.monotonic() > deadline:
                return
            await asyncio.sleep(0.005)
        a, b = self.nodes["A"], self.nodes.get("B")
        if action.kind == "interrupt":
            via = b if action.via == "B" and b is not None else a
            await self._interrupt(via, self.root)
            if action.resume:
                await self._resume_when_interrupted(via)
        elif action.kind == "interrupt_child":
            tree = await read_tree(self.reader, self.root)
            running = (
                [r.session_id for r in tree.running() if r.session_id != self.root] if tree else []
            )
            if running:
                await self._interrupt(a, sorted(running)[0])
        elif action.kind == "crash_restart":
            if not await a.crash():
                self._violate("crash_hang", "a crashed node's runtime would not stop")
            await asyncio.sleep(action.delay)
            again = self._node("A", "a", 0)
            again.store.arm()
            starting = asyncio.get_running_loop().create_task(again.start())
            self._starting.add(starting)
        elif action.kind in ("crash_takeover", "crash_interrupt"):
            if not await a.crash():
                self._violate("crash_hang", "a crashed node's runtime would not stop")
            if action.kind == "crash_interrupt" and b is not None:
                await self._interrupt(b, self.root)
        elif action.kind == "freeze" and b is not None:
            await self._freeze(a, b)

    async def _interrupt(self, node: Node, session_id: str) -> None:
        for _ in range(3):
            try:
                await node.request(node.runtime.interrupt(session_id, "stop (scenario)"))
                return
            except (StoreError, TimeoutError) as exc:
                self._note(f"interrupt of {session_id} failed: {exc}")
            except AgentServerError as exc:
                self._note(f"interrupt of {session_id} refused: {type(exc).__name__}: {exc}")
                return

    async def _resume_when_interrupted(self, node: Node) -> None:
        for _ in range(200):
            status = await self._root_status()
            if status == "interrupted":
                try:
                    handle = await node.request(node.runtime.resume(self.root))
                except (AgentServerError, TimeoutError) as exc:
                    self._note(f"resume failed: {type(exc).__name__}: {exc}")
                    return
                asyncio.get_running_loop().create_task(self._watch(handle.result(), "resumed"))
                return
            if status in STOPPED_STATUSES:
                return
            await asyncio.sleep(0.01)

    async def _freeze(self, a: Node, b: Node) -> None:
        """A stops past its lease; once B has taken the root over and finished it (or a while
        has passed), A goes on as if nothing had happened, as a SIGSTOPped process does after
        SIGCONT."""
        # Stop it while one of its model calls is in flight, as in the issue: its response
        # comes after the thaw, and its tools then start.
        await poll(lambda: self.ledger.calls[-1].key.kind == "model", timeout=0.5, every=0.001)
        a.store.freeze()
        self.stage.freeze("A")

        async def taken_over() -> bool:
            record = await self.reader.get_session(self.root)
            return record.owner_id == b.runtime.owner_id or record.status in STOPPED_STATUSES

        async def root_stopped() -> bool:
            return await self._root_status() in STOPPED_STATUSES

        await poll(taken_over, timeout=self.scenario.lease_ms / 1000 * 3)
        await poll(root_stopped, timeout=1.0)
        # The models and tools go on first: the lease renewal that would tell A it lost the
        # lease needs a round trip to the database, a tool starts at once.
        self.stage.thaw("A")
        await asyncio.sleep(0)
        a.store.thaw()
        self._note(f"node A thawed with the root {await self._root_status()}")

    # -- settling ------------------------------------------------------------------------------

    async def _settle(self) -> None:
        """Wait until the tree is stopped; classify what is still running when nothing moves."""
        idle = STUCK
        deadline = time.monotonic() + SETTLE
        while True:
            await asyncio.sleep(0.01)
            # Counted before the tree is read: an answer that lands while it is read must not
            # make a tree read before it look final.
            answers = self.answers
            tree = await read_tree(self.reader, self.root)
            if tree is None:
                return
            running = tree.running()
            paused = tree.records[self.root].status == "paused_awaiting_client"
            if not running and not (paused and answers < 2):
                self.report.violations += await check_quiescent(self.reader, tree, self.ledger)
                return
            key, attempts = self.ledger.most_attempts_since_heal()
            if attempts >= LIVELOCK:
                self._violate(
                    "livelock",
                    f"{key} started {attempts} times after the faults healed; {self._who(tree)}",
                )
                break
            if time.monotonic() - self.ledger.last_activity > idle:
                self._classify(tree)
                break
            if time.monotonic() > deadline:
                self._violate("no_quiescence", f"still moving after {SETTLE}s; {self._who(tree)}")
                break
        # Not quiescent: the other checks still say what they can.
        tree = await read_tree(self.reader, self.root)
        if tree is not None:
            found = await check_quiescent(self.reader, tree, self.ledger)
            self.report.violations += [v for v in found if v.kind != "stream_not_ended"]

    def _who(self, tree: Tree) -> str:
        return ", ".join(
            f"{r.session_id}={r.status}/owner={r.owner_id}" for r in tree.running()[:4]
        )

    def _classify(self, tree: Tree) -> None:
        root = tree.records[self.root]
        now = time.time() * 1000
        live = {n.runtime.owner_id: n for n in self.nodes.values() if n.alive}
        if root.status == "running":
            owner = live.get(root.owner_id or "")
            lease_live = (root.lease_expires_at or 0) > now
            if owner is not None and lease_live:
                active = self.root in owner.runtime.trees
                kind = "stuck_owned" if active else "stuck_lease_held"
                self._violate(
                    kind,
                    f"{self.root} running on live node {owner.name} "
                    f"({'in' if active else 'not in'} its active runs) with no progress; "
                    f"{self._who(tree)}; {where_stuck(owner.runtime, self.root)}",
                )
            else:
                self._violate("orphaned", f"{self.root} running with no live owner, not taken over")
        for record in tree.running():
            if record.session_id != self.root and root.status != "running":
                self._violate(
                    "orphaned_child",
                    f"{record.session_id} running under a {root.status} root",
                )


async def poll(
    condition: Callable[[], bool | Awaitable[bool]], *, timeout: float, every: float = 0.01
) -> bool:
    """Whether `condition()` (sync or async) held within `timeout` seconds, checked every
    `every` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        held = condition()
        if not isinstance(held, bool):
            held = await held
        if held or time.monotonic() >= deadline:
            return held
        await asyncio.sleep(every)


def where_stuck(runtime: AgentRuntime, root: str) -> str:
    """Where the root's task waits (the innermost frames of its stack), for a diagnosis."""
    tree = runtime.trees.get(root)
    run = tree.find(root) if tree is not None else None
    task = run.task if run is not None else None
    if task is None:
        busy = [_waits(t) for t in runtime.host._background if "take_over" in _waits(t)]
        return "no root task in its runtime; takeovers at: " + (" | ".join(busy) or "none")
    return "root task at " + _waits(task)


SCENARIO_LIMIT = 60.0
"""Longest a scenario may take, whatever happens: past it, it is reported and abandoned."""


async def run_scenario(bed: Bed, scenario: Scenario) -> Report:
    """Run `scenario` on `bed` and report what it broke. A scenario that does not finish within
    `SCENARIO_LIMIT` (something waited on a cancellation that never came) is reported with
    where it waited, and left behind."""
    run = ScenarioRun(bed, scenario)
    task = asyncio.get_running_loop().create_task(run.run())
    done, _ = await asyncio.wait([task], timeout=SCENARIO_LIMIT)
    if task in done:
        return task.result()
    report = run.report
    report.violations.append(
        Violation("scenario_timeout", f"still going after {SCENARIO_LIMIT}s: {_waits(task)}")
    )
    task.cancel()
    return report


def _waits(task: asyncio.Task[Any]) -> str:
    frames = []
    coroutine: Any = task.get_coro()
    while coroutine is not None:
        frame = getattr(coroutine, "cr_frame", None) or getattr(coroutine, "ag_frame", None)
        if frame is not None:
            name = Path(frame.f_code.co_filename).name
            frames.append(f"{name}:{frame.f_lineno} {frame.f_code.co_name}")
        coroutine = getattr(coroutine, "cr_await", None) or getattr(coroutine, "ag_await", None)
    return " > ".join(frames[-9:])


def scenario_count(default: int = 200) -> int:
    """How many scenarios per store: `FAULT_SCENARIOS`, else `default`."""
    return int(os.environ.get("FAULT_SCENARIOS", default))


def first_seed() -> int:
    """The first seed: `FAULT_SEED`, else 1."""
    return int(os.environ.get("FAULT_SEED", 1))
