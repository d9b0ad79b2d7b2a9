"""Starting a root session, and resuming one: what a start request must be, when it names one
that exists, and what a resume of a stored session appends to it.

`plan_session` checks a request and builds the session it would create, touching nothing but
reads; `existing_session` applies the idempotency rules of `POST /start` to the store:

- a repeated `Idempotency-Key` answers with the session it created, provided the request is the
  same (the same fingerprint: agent, message, input, session id and parent); the same key with
  another request is `IdempotencyKeyReusedError` (the IETF idempotency-key draft's 422);
- the `sessionId` of a running session answers with that session; of a stopped one, it is a
  `SessionNotResumableError` (409: continue it with `resume`).

`AgentRuntime.start` puts them together, and retries the lookup when it loses the creation to an
identical request.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from pydantic import JsonValue

from app.agents import AgentConfig, AgentRegistry
from app.errors import (
    AnswersDoNotFitError,
    IdempotencyKeyReusedError,
    ParentSessionNotFoundError,
    SessionNotFoundError,
    SessionNotResumableError,
)
from app.ids import is_remote_child_id, new_session_id, validate_session_id
from app.protocol import Message, UserMessage
from app.protocol.values import clean_text
from app.runtime.handle import RunHandle
from app.runtime.inputs import Answers, first_message, fitted_input, json_input, seed_state
from app.store import SessionRecord, StateStore, now_ms


@dataclass(frozen=True, slots=True)
class Started:
    """What `AgentRuntime.start` answered a start request with."""

    record: SessionRecord
    """The session: the one just created, or the existing one the request names."""
    handle: RunHandle | None
    """The new run; None when an existing session answered and nothing started."""

    @property
    def created(self) -> bool:
        """Whether the request created the session."""
        return self.handle is not None


@dataclass(frozen=True, slots=True)
class SessionPlan:
    """A checked start request: the session it creates, with its first message."""

    agent: AgentConfig
    record: SessionRecord
    first: UserMessage
    requested_id: bool
    """Whether the caller chose the session id (else it was generated)."""

    @property
    def cannot_conflict(self) -> bool:
        """Whether only a failing store can refuse the creation: a generated id and no key."""
        return not self.requested_id and self.record.idempotency_key is None


def request_fingerprint(
    agent_type: str,
    message: str | None,
    input: JsonValue,
    session_id: str | None,
    parent_session_id: str | None,
) -> str:
    """A digest of a start request's meaning: the same for the same values, whatever their
    JSON spelling (key order, spaces, escapes)."""
    canonical = json.dumps(
        [agent_type, message, input, session_id, parent_session_id],
        sort_keys=True,
        separators=(",", ":"),
    )
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


async def plan_session(
    registry: AgentRegistry,
    store: StateStore,
    agent: AgentConfig,
    message: str | None,
    *,
    input: Any,
    session_id: str | None,
    parent_session_id: str | None,
    idempotency_key: str | None,
    owner_id: str,
    lease_ms: int,
) -> SessionPlan:
    """Check a start request and build the session it creates. Invalid ids and an input that
    fits neither the agent's input schema nor its state schema are `InvalidRequestError`s; a
    parent that is neither stored here nor named by the session id (a remote child's
    `{parent}-remote-{callId}`) is `ParentSessionNotFoundError`."""
    if session_id is not None:
        validate_session_id(session_id)
    if parent_session_id is not None:
        validate_session_id(parent_session_id)
    raw_input = json_input(input)
    input_json = fitted_input(registry.input_schema(agent.name), raw_input)
    first = UserMessage(content=first_message(message, input_json))
    state = seed_state(agent, input_json)
    if parent_session_id is not None:
        await _check_parent(store, parent_session_id, session_id)
    fingerprint = None
    if idempotency_key is not None:
        fingerprint = request_fingerprint(
            agent.name, message, raw_input, session_id, parent_session_id
        )
    now = now_ms()
    chosen = session_id or new_session_id()
    record = SessionRecord(
        session_id=chosen,
        agent_type=agent.name,
        stream_id=chosen,
        status="running",
        created_at=now,
        updated_at=now,
        parent_session_id=parent_session_id,
        state=state,
        input=input_json,
        idempotency_key=idempotency_key,
        owner_id=owner_id,
        lease_expires_at=now + lease_ms,
        request_fingerprint=fingerprint,
    )
    return SessionPlan(agent, record, first, requested_id=session_id is not None)


async def _check_parent(store: StateStore, parent_session_id: str, session_id: str | None) -> None:
    if session_id is not None and is_remote_child_id(session_id, parent_session_id):
        return  # the parent lives on the server that delegates to this one
    try:
        await store.get_session(parent_session_id)
    except SessionNotFoundError:
        raise ParentSessionNotFoundError(
            f"parentSessionId {parent_session_id!r} is not a session of this server, and "
            f"sessionId is not its remote child's ({parent_session_id}-remote-<callId>)"
        ) from None


async def existing_session(store: StateStore, plan: SessionPlan) -> SessionRecord | None:
    """The stored session a start request names (by its idempotency key, else by its chosen
    session id) that answers it instead of a new one; None when the request creates one."""
    key = plan.record.idempotency_key
    if key is not None:
        found = await store.find_session_by_idempotency_key(key)
        if found is not None:
            # Sessions stored before fingerprints were kept have none: their key alone decides.
            fingerprint = found.request_fingerprint
            if fingerprint is not None and fingerprint != plan.record.request_fingerprint:
                raise IdempotencyKeyReusedError(
                    f"Idempotency-Key {key!r} was used for another request (session "
                    f"{found.session_id!r}): send that request again to get its session, or "
                    "use a new key for a new request"
                )
            return found
    if not plan.requested_id:
        return None
    session_id = plan.record.session_id
    try:
        found = await store.get_session(session_id)
    except SessionNotFoundError:
        return None
    if found.status != "running":
        raise SessionNotResumableError(
            f"Session {session_id!r} exists and is {found.status}: continue it with "
            f"POST /resume/{session_id}"
        )
    return found


def resumption(
    record: SessionRecord, message: str | None, answers: Answers
) -> tuple[SessionRecord, list[Message]]:
    """How a stored root session resumes: its record for the new run and the new turn's
    message, if any (a paused tree's answers are planned apart: `pending.plan_answers`).
    Refuses what does not fit its status, changing nothing."""
    session_id = record.session_id
    # Answers to a session that waits for none conflict with its state (409), like a resume
    # while it runs: the same body fits once it is paused.
    if record.status != "paused_awaiting_client" and not answers.empty:
        raise SessionNotResumableError(
            f"Session {session_id!r} is {record.status}: it waits for no tool results or approvals"
        )
    if record.status == "paused_awaiting_client":
        if message is not None:
            raise AnswersDoNotFitError(
                f"Session {session_id!r} waits for tool results or approvals, not a message"
            )
        return record, []
    if record.status in ("completed", "failed", "terminated"):
        if message is None:
            raise SessionNotResumableError(
                f"Session {session_id!r} is {record.status}: continue it with a new message"
            )
        turn = record.evolve(step_count=0, output=None, error=None)
        return turn, [UserMessage(content=clean_text(message))]
    if record.status in ("interrupted", "running"):
        if message is not None:
            raise SessionNotResumableError(
                f"Session {session_id!r} is {record.status}: it resumes from its checkpoint "
                "and takes no new message until it has finished"
            )
        return record, []
    raise SessionNotResumableError(f"Session {session_id!r} is {record.status}")
