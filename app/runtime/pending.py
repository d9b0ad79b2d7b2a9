"""The calls a paused tree waits for, wherever they are in it, and the answers that resume it.

A client tool or an approval anywhere in a tree pauses the whole tree: the session that made
the call keeps its checkpoint, and each ancestor pauses with the call to its child unanswered.
`paused_tree` walks the paused sessions down from the root (and asks remote servers for
theirs); `plan_answers` checks a resume's answers against them, all before anything is written,
and says where each answer goes. See docs/architecture.md, "Suspension".
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, Literal

from app.agents import AgentConfig, AgentRegistry, RemoteAgentTransport, Tool
from app.errors import AnswersDoNotFitError, RemoteAgentError
from app.protocol import Message, SessionStatus, ToolCall, ToolMessage
from app.protocol.api import PendingCall
from app.runtime.background import background_children
from app.runtime.dispatch import delegations
from app.runtime.inputs import REJECTED, Answers
from app.runtime.local import stored
from app.runtime.outcome import unanswered_calls
from app.runtime.remote import RemoteDelegation
from app.runtime.resolve import child_agent
from app.runtime.session_state import Resumed
from app.store import SessionRecord, StateStore

logger = logging.getLogger(__name__)

PAUSED: frozenset[SessionStatus] = frozenset({"paused_awaiting_client"})

REMOTE_STATUS_TIMEOUT = 5.0
"""Seconds given to a remote server to say what its paused child waits for."""


@dataclass(frozen=True, slots=True)
class Waiting:
    """A call of the tree that waits for the client, and where its answer goes."""

    pending: PendingCall
    call: ToolCall | None = None
    """The call itself, when it is a call of a session of this server."""
    remote: tuple[RemoteAgentTransport, str] | None = None
    """When it is on another server: the transport, and the remote child (on that server, a
    root) through whose resume the answer goes."""


@dataclass(slots=True)
class PausedTree:
    """What a paused tree waits for: the calls the client answers, and, by session, the calls
    whose `tool_start` stays open in the stream until they end on resume (those the client
    answers, and those whose child paused)."""

    waiting: list[Waiting] = field(default_factory=list)
    open_calls: dict[str, set[str]] = field(default_factory=dict)


async def paused_tree(
    store: StateStore,
    registry: AgentRegistry,
    root: SessionRecord,
    *,
    strict: bool = False,
) -> PausedTree:
    """Every call of the paused tree under `root` that waits for the client, in tree order
    (for a root, also under its children that run on its own and paused, its turn over or not).
        A remote server that does not answer in time is left out, unless `strict` (resuming needs
        all of them), when it is a `RemoteAgentError`."""
    found = PausedTree()
    sessions = [(root, registry.get(root.agent_type))]
    if root.is_root:
        # Children running on their own pause apart from their parents' calls.
        alone = await background_children(store, registry, root.stream_id, PAUSED)
        sessions += [(child.record, child.agent) for child in alone]
    while sessions:
        session, agent = sessions.pop(0)
        if session.status != "paused_awaiting_client":
            continue
        session_id = session.session_id
        kinds = delegations(agent)
        opened = found.open_calls.setdefault(session_id, set())
        calls = unanswered_calls(await store.load_messages(session_id))
        # A local child (a sub-agent's, or a persistent one's) is found by the call that
        # started it; a remote one through its server.
        started = {
            ref.parent_tool_call_id: ref for ref in await store.get_sub_session_refs(session_id)
        }
        for call in calls:
            assert call.id is not None
            reason = _waits_for(agent, call)
            if reason is not None:
                found.waiting.append(Waiting(_pending(session_id, call, reason), call=call))
                opened.add(call.id)
                continue
            kind = kinds.get(call.name)
            ref = started.get(call.id)
            if not isinstance(kind, RemoteDelegation):
                child = None if ref is None else await stored(store, ref.sub_session_id)
                if (
                    ref is not None
                    and child is not None
                    and child.status == "paused_awaiting_client"
                ):
                    sessions.append((child, child_agent(registry, agent, child, ref)))
                    opened.add(call.id)
            else:
                remote = await _remote(kind, kind.child_id(session_id, call.id), strict=strict)
                if remote is not None:
                    found.waiting += remote
                    opened.add(call.id)
    return found


async def _remote(kind: RemoteDelegation, child_id: str, *, strict: bool) -> list[Waiting] | None:
    """What a remote child waits for, None when it does not wait (or its server is silent)."""
    transport = kind.tool.transport
    try:
        async with asyncio.timeout(REMOTE_STATUS_TIMEOUT):
            status = await transport.get_status(child_id)
    except (RemoteAgentError, TimeoutError) as exc:
        if strict:
            raise RemoteAgentError(
                f"The server of remote session {child_id!r} does not say what it waits for"
            ) from exc
        logger.warning("Remote session %s: its pending calls are unknown: %s", child_id, exc)
        return None
    if status is None or status.status != "paused_awaiting_client":
        return None
    return [Waiting(pending, remote=(transport, child_id)) for pending in status.pending_calls]


def _waits_for(agent: AgentConfig, call: ToolCall) -> Literal["client", "approval"] | None:
    tool = agent.tool_map.get(call.name)
    if not isinstance(tool, Tool):
        return None
    if tool.is_client_tool:
        return "client"
    return "approval" if tool.requires_approval else None


def _pending(session_id: str, call: ToolCall, reason: Literal["client", "approval"]) -> PendingCall:
    assert call.id is not None
    return PendingCall(
        session_id=session_id,
        tool_call_id=call.id,
        tool_name=call.name,
        arguments=call.arguments,
        reason=reason,
    )


@dataclass(slots=True)
class AnswerPlan:
    """Where a resume's answers go."""

    messages: dict[str, list[Message]] = field(default_factory=dict)
    """The tool messages each session of this server gets (results, refused approvals)."""
    resumed: dict[str, Resumed] = field(default_factory=dict)
    """What each paused session of this server takes up when it runs again."""
    remote: dict[str, tuple[RemoteAgentTransport, list[Any], list[Any]]] = field(
        default_factory=dict
    )
    """For each remote child: its transport, and the tool results and approvals it gets."""


def plan_answers(paused: PausedTree, answers: Answers, root_id: str) -> AnswerPlan:
    """Check `answers` against the calls the tree waits for: each must answer a waiting call of
    its kind (a result for a client tool, a decision for an approval), and every waiting call
    must get its answer, once. `AnswersDoNotFitError` otherwise, before anything is written."""
    if answers.repeated is not None:
        raise AnswersDoNotFitError(answers.repeated)
    by_key = {(w.pending.session_id, w.pending.tool_call_id): w for w in paused.waiting}
    results = _keyed(answers.results, root_id)
    decisions = _keyed(answers.approvals, root_id)
    checks = [
        ("toolResults", set(results), _expected(by_key, "client"), "a client tool's result"),
        ("approvals", set(decisions), _expected(by_key, "approval"), "an approval"),
    ]
    for kind, given, expected, what in checks:
        unknown = sorted(given - expected)
        if unknown:
            listed = ", ".join(_named(key) for key in sorted(expected)) or "none"
            raise AnswersDoNotFitError(
                f"{kind}: no call awaiting {what} has the id {_named(unknown[0])} "
                f"(awaiting {what}: {listed})"
            )
    for kind, given, expected, what in checks:
        missing = sorted(expected - given)
        if missing:
            named = ", ".join(_named(key) for key in missing)
            raise AnswersDoNotFitError(f"{kind}: {what} is missing for {named}")
    plan = AnswerPlan()
    approved: dict[str, set[str]] = {}
    for (session_id, call_id), entry in by_key.items():
        key = (session_id, call_id)
        if entry.remote is not None:
            transport, child_id = entry.remote
            _, remote_results, remote_approvals = plan.remote.setdefault(
                child_id, (transport, [], [])
            )
            if key in results:
                remote_results.append(
                    {"sessionId": session_id, "toolCallId": call_id, "result": results[key]}
                )
            else:
                remote_approvals.append(
                    {"sessionId": session_id, "toolCallId": call_id, "approved": decisions[key]}
                )
            continue
        call = entry.call
        assert call is not None
        if key in results:
            message = ToolMessage(tool_call_id=call_id, tool_name=call.name, result=results[key])
        elif decisions[key]:
            approved.setdefault(session_id, set()).add(call_id)
            continue
        else:
            message = ToolMessage(tool_call_id=call_id, tool_name=call.name, error=REJECTED)
        plan.messages.setdefault(session_id, []).append(message)
    plan.resumed = {
        session_id: Resumed(
            approved=frozenset(approved.get(session_id, ())),
            open_calls=frozenset(calls),
        )
        for session_id, calls in paused.open_calls.items()
    }
    return plan


def _keyed(given: dict[tuple[str | None, str], Any], root_id: str) -> dict[tuple[str, str], Any]:
    """Answers by (session, call), the root's when they name none."""
    keyed = {(session or root_id, call): value for (session, call), value in given.items()}
    if len(keyed) < len(given):
        twice = sorted({call for session, call in given if session is None})
        raise AnswersDoNotFitError(f"{', '.join(twice)} answered more than once")
    return keyed


def _expected(waiting: dict[tuple[str, str], Waiting], reason: str) -> set[tuple[str, str]]:
    return {key for key, entry in waiting.items() if entry.pending.reason == reason}


def _named(key: tuple[str, str]) -> str:
    session_id, call_id = key
    return f"{call_id} (session {session_id})"
