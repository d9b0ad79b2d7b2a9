"""What the control tools of background `subagent` sessions do: `subagent_status`,
`subagent_result`, `subagent_cancel` and `subagent_wait` (defined in
app/agents/delegation_tools.py). A session answers for its own background children only, found
by their refs (`mode: background`). Every child of a tree runs in the process that runs the
tree, so waiting for one is waiting for its run here. See docs/architecture.md, "Background
delegation".
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pydantic import JsonValue

from app.agents.delegation_tools import (
    DelegationTool,
    SubagentCancelInput,
    SubagentResultInput,
    SubagentStatusInput,
    SubagentWaitInput,
)
from app.agents.results import TERMINAL, StatusRow, result_payload, status_payload, status_table
from app.protocol import SubSessionRef
from app.runtime.calls import CallResult, parse_arguments
from app.runtime.outcome import Stop
from app.runtime.persistent import Owner
from app.runtime.tasks import lifecycle, where
from app.store import SessionRecord

CANCELLED = "Cancelled by its parent"
"""The error of a background session `subagent_cancel` ended."""


async def control_call(owner: Owner, tool: DelegationTool, arguments: Any) -> CallResult:
    """Make one control call (its arguments checked first: a bad one is a tool error)."""
    parsed = parse_arguments(tool.name, tool.input_schema, arguments)
    if isinstance(parsed, CallResult):
        return parsed
    control = Control(owner)
    if isinstance(parsed, SubagentStatusInput):
        return await control.status(parsed.session_id)
    if isinstance(parsed, SubagentResultInput):
        return await control.result(parsed)
    if isinstance(parsed, SubagentCancelInput):
        return await control.cancel(parsed.session_id)
    assert isinstance(parsed, SubagentWaitInput)
    return await control.wait(parsed)


class Control:
    """The control calls of one session over its background children."""

    def __init__(self, owner: Owner) -> None:
        self.owner = owner
        self.store = owner.tree.store

    async def sessions(self) -> dict[str, SubSessionRef]:
        """The session's background children, by session id, oldest first."""
        refs = await self.store.get_sub_session_refs(self.owner.session_id)
        background = [ref for ref in refs if ref.mode == "background"]
        background.sort(key=lambda ref: (ref.started_at, ref.sub_session_id))
        return {ref.sub_session_id: ref for ref in background}

    async def _find(self, session_id: str) -> SubSessionRef | CallResult:
        known = await self.sessions()
        ref = known.get(session_id)
        if ref is not None:
            return ref
        listed = ", ".join(known) or "none"
        return CallResult(error=f"No background session {session_id!r} of yours; yours: {listed}")

    async def _payload(self, ref: SubSessionRef) -> dict[str, JsonValue]:
        record = await self.store.get_session(ref.sub_session_id)
        state, position = await where(self.store, record)
        return status_payload(
            session_id=record.session_id,
            category=record.agent_type,
            lifecycle=state,
            error=record.error,
            queue_position=position,
        )

    async def status(self, session_id: str | None) -> CallResult:
        """One session's status, or a table of them all."""
        if session_id is not None:
            ref = await self._find(session_id)
            if isinstance(ref, CallResult):
                return ref
            return CallResult(result=await self._payload(ref))
        rows = []
        for ref in (await self.sessions()).values():
            payload = await self._payload(ref)
            position = payload.get("queue_position")
            rows.append(
                StatusRow(
                    ref.sub_session_id,
                    ref.agent_type,
                    lifecycle=payload["lifecycle_status"],  # type: ignore[arg-type]
                    queue_position=position if isinstance(position, int) else None,
                )
            )
        return CallResult(result=status_table(rows))

    async def result(self, args: SubagentResultInput) -> CallResult:
        """The session's result, once it has ended (waiting up to `timeout` for that)."""
        ref = await self._find(args.session_id)
        if isinstance(ref, CallResult):
            return ref
        await self._ended([ref.sub_session_id], args.timeout)
        record = await self.store.get_session(ref.sub_session_id)
        state, position = await where(self.store, record)
        payload = result_payload(
            session_id=record.session_id,
            category=record.agent_type,
            lifecycle=state,
            read_method=args.read_method,
            output=_text(record),
            error=record.error if state in ("failed", "timed_out", "cancelled") else None,
            queue_position=position,
        )
        return CallResult(result=payload)

    async def cancel(self, session_id: str) -> CallResult:
        """Cancel the session: a queued one never starts, a running one stops."""
        ref = await self._find(session_id)
        if isinstance(ref, CallResult):
            return ref
        record = await self.store.get_session(session_id)
        if lifecycle(record) in TERMINAL:
            return CallResult(error=f"Session {session_id} has already ended ({lifecycle(record)})")
        tree = self.owner.tree
        run = tree.find(session_id)
        if run is not None:
            # Withdrawn first: no claim of this process grants it a slot from now on.
            await tree.scheduler.withdraw(session_id)
            finished = tree.finished(session_id)
            run.stop(Stop("terminated", CANCELLED))
            await finished
            await tree.writer.settled()
        return CallResult(result=await self._payload(ref))

    async def wait(self, args: SubagentWaitInput) -> CallResult:
        """Park until one of the sessions (of all of them when none is named) ends, or the
        timeout passes; their statuses then."""
        known = await self.sessions()
        ids = args.session_ids or list(known)
        unknown = [session_id for session_id in ids if session_id not in known]
        if unknown:
            listed = ", ".join(known) or "none"
            return CallResult(
                error=f"No background session {unknown[0]!r} of yours; yours: {listed}"
            )
        open_ = []
        for session_id in ids:
            if lifecycle(await self.store.get_session(session_id)) not in TERMINAL:
                open_.append(session_id)
        if open_:
            await self._ended(open_, args.timeout, first=True)
        statuses: list[JsonValue] = [await self._payload(known[session_id]) for session_id in ids]
        return CallResult(result={"sessions": statuses})

    async def _ended(
        self, session_ids: list[str], timeout: float | None, *, first: bool = False
    ) -> None:
        """Wait until the sessions' runs here have stopped (`first`: one of them), at most
        `timeout` seconds."""
        tree = self.owner.tree
        futures = [tree.finished(session_id) for session_id in session_ids]
        try:
            if futures:
                mode = asyncio.FIRST_COMPLETED if first else asyncio.ALL_COMPLETED
                await asyncio.wait(futures, timeout=timeout, return_when=mode)
        finally:
            for future in futures:
                future.cancel()
        # A run's end may still be on its way to the store: what is read next must hold it.
        await tree.writer.settled()


def _text(record: SessionRecord) -> str | None:
    """The child's output as text: its final text, or a typed output as JSON."""
    output = record.output
    if output is None or isinstance(output, str):
        return output
    return json.dumps(output, ensure_ascii=False)
