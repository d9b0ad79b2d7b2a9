"""What the companion tools do: spawn a persistent child, message it, list the children, look
at one, wait for one, terminate one (the tools are defined in app/agents/companion.py; the
last three, for a child already spawned, in app/runtime/supervision.py).

A blocking child runs inside its parent's call, like an ephemeral sub-agent; a non-blocking one
runs on its own in the tree (`Tree.start`), framed in the stream from its spawn to its end, and
its parent hears of its end in a notice (app/runtime/news.py). A call made again after a crash
finds the child it started by the ref's `parentToolCallId`. See docs/architecture.md,
"Persistent children".
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from pydantic import BaseModel, JsonValue

from app.agents import PersistentAgent
from app.agents.companion import CompanionTool, NameInput, SendInput, SpawnInput
from app.protocol import SubSessionRef
from app.runtime.calls import CallResult, parse_arguments
from app.runtime.child_kinds import Run
from app.runtime.children import Frame, Unanswered
from app.runtime.hooks import fire
from app.runtime.local import NewChild, stored
from app.runtime.outcome import Outcome
from app.runtime.persistent import (
    Owner,
    auto_name,
    bad_name,
    child_id,
    detach,
    fresh_child,
    live,
    open_again,
    open_continued,
    open_fresh,
    persistent_refs,
)
from app.runtime.subtree import descendants
from app.runtime.supervision import listed, settled, status_of, terminate, wait_for
from app.store import InboxAppend, RefUpsert, WriteBatch

Later = Callable[[], Awaitable[CallResult | Unanswered]]
"""The rest of a call that opened a blocking child: running it, once the opening is over."""
Opened = CallResult | Unanswered | Later
"""What a spawn or a message did while its session's children were being opened."""

REOPENED = frozenset({"running", "interrupted", "paused_awaiting_client"})
"""Where a child a call started is found again from its checkpoint (and a failed one whose
parent suspended)."""


async def companion_call(
    owner: Owner, tool: CompanionTool, call_id: str, arguments: Any
) -> CallResult | Unanswered:
    """Make one companion call: its result (`CallResult`), or `Unanswered` when its blocking
    child pauses for the client or is dropped by a suspension."""
    parsed = parse_arguments(tool.name, tool.input_schema, arguments)
    if isinstance(parsed, CallResult):
        return parsed
    return await Companion(owner, tool, call_id).make(parsed)


class Companion:
    """One companion call of a session."""

    def __init__(self, owner: Owner, tool: CompanionTool, call_id: str) -> None:
        self.owner = owner
        self.tool = tool
        self.call_id = call_id

    async def make(self, args: BaseModel) -> CallResult | Unanswered:
        action = self.tool.action
        if isinstance(args, SpawnInput | SendInput):
            # The calls of a step that start children pick them one at a time (names, running
            # children), then let them run side by side.
            children = self.owner.children
            async with children.opening:
                known = children.named
                if known is None:
                    known = children.named = await self._refs()
                created = self._create(args, known) if isinstance(args, SpawnInput) else None
                if created is None:
                    opened = await (
                        self.spawn(args, await self._refs())
                        if isinstance(args, SpawnInput)
                        else self.send(args, await self._refs())
                    )
                    children.named = None  # it may have changed what is known: read it again
            if created is not None:
                opened = await self._created(*created)
            return opened if isinstance(opened, CallResult | Unanswered) else await opened()
        refs = await self._refs()
        if action == "list":
            return CallResult(result={"children": [listed(ref) for ref in refs.values()]})
        assert isinstance(args, NameInput)
        ref = refs.get(args.name)
        if ref is None:
            return _unknown(args.name, refs)
        if action == "status":
            return await status_of(self.owner, ref)
        if action == "wait":
            return await wait_for(self.owner, self.call_id, ref)
        return await terminate(self.owner, ref)

    async def _refs(self) -> dict[str, SubSessionRef]:
        """The session's persistent children, as stored once its own writes have landed."""
        tree = self.owner.tree
        await tree.writer.settled()
        return persistent_refs(await tree.store.get_sub_session_refs(self.owner.session_id))

    # -- spawn and send ----------------------------------------------------------------------

    def _create(
        self, args: SpawnInput, known: dict[str, SubSessionRef]
    ) -> tuple[PersistentAgent, NewChild, asyncio.Future[None]] | None:
        """The common spawn, a new name: the child's creation is handed to the store now and
        its name taken, so the next spawn of the step need not wait for it to land. None for
        any other spawn."""
        entry = self.tool.persistent(args.agent)
        assert entry is not None  # the input schema allows only the configured types
        if _started_by(known, self.call_id) is not None:
            return None
        name = args.name if args.name is not None else auto_name(known, entry.agent.name)
        if name in known or bad_name(name) is not None:
            return None
        fresh = fresh_child(self.owner, entry, name, self.call_id, args.initialMessage)
        batch = WriteBatch()
        fresh.add_to(batch)
        landed = self.owner.tree.writer.submit(batch)
        known[name] = fresh.ref
        return entry, fresh, landed

    async def _created(
        self, entry: PersistentAgent, fresh: NewChild, landed: asyncio.Future[None]
    ) -> Opened:
        await landed
        run = fresh.start(self.owner)
        return await self._run(entry, fresh.ref.name or "", run, fresh.first.content)

    async def spawn(self, args: SpawnInput, refs: dict[str, SubSessionRef]) -> Opened:
        entry = self.tool.persistent(args.agent)
        assert entry is not None  # the input schema allows only the configured types
        again = _started_by(refs, self.call_id)
        if again is not None:
            return await self._again(entry, again)
        name = args.name if args.name is not None else auto_name(refs, entry.agent.name)
        why = bad_name(name)
        if why is not None:
            return CallResult(error=why)
        ref = refs.get(name)
        if ref is None:
            run = await open_fresh(self.owner, entry, name, self.call_id, args.initialMessage)
            return await self._run(entry, name, run, args.initialMessage)
        if ref.agent_type != entry.agent.name:
            return CallResult(
                error=f"The name {name!r} is taken by a child of type {ref.agent_type!r}"
            )
        record = await stored(self.owner.tree.store, ref.sub_session_id)
        status = record.status if record is not None else "failed"
        if status == "completed":
            assert record is not None
            run = await open_continued(
                self.owner, entry, record, ref, self.call_id, args.initialMessage
            )
        elif status in ("failed", "terminated"):
            superseded = await descendants(self.owner.tree.store, ref.sub_session_id)
            run = await open_fresh(
                self.owner, entry, name, self.call_id, args.initialMessage, superseded=superseded
            )
        else:
            return CallResult(
                error=f"Child {name!r} is {status}: send it a message with "
                "companion__sendMessage instead"
            )
        return await self._run(entry, name, run, args.initialMessage)

    async def send(self, args: SendInput, refs: dict[str, SubSessionRef]) -> Opened:
        ref = refs.get(args.name)
        if ref is None:
            return _unknown(args.name, refs)
        entry = self.owner.agent.persistent(ref.agent_type)
        if entry is None:
            return CallResult(error=f"Child {args.name!r} is of a type this agent no longer has")
        if ref.parent_tool_call_id == self.call_id:
            return await self._again(entry, ref)
        tree = self.owner.tree
        child = ref.sub_session_id
        run: Run | None = tree.find(child)
        if run is not None and not run.ending:
            # It runs: the message waits in its inbox, and the ref names this call, so the
            # call made again after a crash queues nothing more.
            told = ref.replaced({"parent_tool_call_id": self.call_id})
            inbox = [InboxAppend(child, args.message)]
            refs_told = [RefUpsert(self.owner.session_id, told)]
            await tree.writer.commit(WriteBatch(inbox=inbox, refs=refs_told))
            run.inbox_due = True
            result = _spawned(args.name, child, "running")
            assert isinstance(result.result, dict)
            result.result["queued"] = True
            return result
        if run is not None:
            await tree.finished(child)
            await tree.writer.settled()
        record = await stored(tree.store, child)
        status = record.status if record is not None else "failed"
        if status != "completed":
            return CallResult(error=_not_talking(args.name, status))
        assert record is not None
        continued = await open_continued(self.owner, entry, record, ref, self.call_id, args.message)
        return await self._run(entry, args.name, continued, args.message)

    async def _again(self, entry: PersistentAgent, ref: SubSessionRef) -> Opened:
        """This call, made again (after a crash, or on resume): carry on with the child it
        started, or answer as it did."""
        tree = self.owner.tree
        child = ref.sub_session_id
        name = ref.name or ""
        record = await stored(tree.store, child)
        if record is None:
            return CallResult(error=f"Child {name!r} is lost")
        here = tree.find(child) is not None
        stopped = record.status in REOPENED or record.failure_reason == "parent_suspended"
        reopen = stopped and not here
        if entry.mode == "non-blocking":
            if reopen:
                self._detach(
                    entry,
                    child,
                    await open_again(tree, self.owner.session_id, entry.agent, record, ref),
                )
            return _spawned(name, child, "running" if stopped else record.status)
        if here:  # it runs inside another call of this step: its end is this call's result

            async def ended() -> CallResult | Unanswered:
                await tree.finished(child)
                await tree.writer.settled()
                latest = await stored(tree.store, child) or record
                return await self._inline(entry.agent.name, child, None, _done(settled(latest)))

            return ended
        if reopen:
            return await self._run(
                entry,
                name,
                await open_again(tree, self.owner.session_id, entry.agent, record, ref),
                None,
            )
        return lambda: self._inline(entry.agent.name, child, None, _done(settled(record)))

    async def _run(
        self, entry: PersistentAgent, name: str, run: Run, message: str | None
    ) -> Opened:
        """Run a child just opened: on its own when non-blocking, else (once the opening is
        over) inside this call."""
        child = child_id(self.owner, name)
        if entry.mode == "non-blocking":
            hooks = self.owner.agent.hooks
            context = self.owner.hook_context()
            await fire(
                hooks.before_sub_agent, context, entry.agent.name, child, {"message": message}
            )
            self._detach(entry, child, run)
            return _spawned(name, child, "running")
        return lambda: self._inline(
            entry.agent.name, child, message, live(self.owner.children, child, run)
        )

    async def _inline(
        self, agent_type: str, child: str, message: str | None, life: Coroutine[Any, Any, Outcome]
    ) -> CallResult | Unanswered:
        children = self.owner.children
        child_input: dict[str, JsonValue] = {"message": message}
        outcome = await children.run_child(agent_type, self.call_id, child, child_input, life)
        return children.answer(outcome)

    def _detach(self, entry: PersistentAgent, child: str, run: Run) -> None:
        owner = self.owner
        frame = Frame(
            owner.session_id, owner.agent.name, owner.step, self.call_id, entry.agent.name, child
        )
        detach(owner.tree, run, frame)


def _started_by(refs: dict[str, SubSessionRef], call_id: str) -> SubSessionRef | None:
    return next((ref for ref in refs.values() if ref.parent_tool_call_id == call_id), None)


async def _done(outcome: Outcome) -> Outcome:
    return outcome


def _spawned(name: str, child: str, status: str) -> CallResult:
    return CallResult(result={"name": name, "sessionId": child, "status": status})


def _not_talking(name: str, status: str) -> str:
    if status in ("failed", "terminated"):
        return f"Child {name!r} is {status}: spawn it again to start it afresh"
    return f"Child {name!r} is {status}: it takes messages again once its tree resumes"


def _unknown(name: str, refs: dict[str, SubSessionRef]) -> CallResult:
    known = ", ".join(sorted(refs)) or "none yet"
    return CallResult(error=f"No child is named {name!r}; your children: {known}")
