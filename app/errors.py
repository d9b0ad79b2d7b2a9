"""One root error with a stable code, so every failure can be told apart and translated once.

Two families: `DefinitionError` for a developer's mistake while defining agents and tools
(raised at import or registry time), and `RunError` for what goes wrong while a run executes.
Store and transport errors sit beside them. Each class's docstring is its default message;
`code` is the stable name the HTTP API reports.
"""

from __future__ import annotations

from typing import Any, ClassVar


class AgentServerError(Exception):
    """An agent server error."""

    code: ClassVar[str] = "agent_server_error"
    http_status: ClassVar[int] = 500

    def __init__(self, message: str | None = None) -> None:
        self.message = message or self.default_message()
        super().__init__(self.message)

    @classmethod
    def default_message(cls) -> str:
        """The class's docstring: what any error of the class means, with no detail of this one
        (what a client of a server error is told, while the detail goes to the log)."""
        return (cls.__doc__ or cls.code).strip()


# -- definition time ------------------------------------------------------------------------------


class DefinitionError(AgentServerError, ValueError):
    """An agent or tool definition is invalid."""

    code = "invalid_definition"


# -- runs -----------------------------------------------------------------------------------------


class RunError(AgentServerError):
    """The run failed."""

    code = "run_failed"


class MaxStepsExceededError(RunError):
    """Max steps exceeded"""

    code = "max_steps_exceeded"


class ModelError(RunError):
    """The model failed to answer."""

    code = "model_error"


class ScriptExhaustedError(ModelError):
    """The scripted model has no response left for this session."""

    code = "script_exhausted"


class ToolNotOfferedError(ModelError):
    """The model called a tool that was not offered to it."""

    code = "tool_not_offered"


class ProviderError(ModelError):
    """The model provider refused the request."""

    code = "provider_error"


class TransientModelError(ModelError):
    """The model provider failed in a way worth retrying (connection, timeout, 429, 5xx)."""

    code = "model_unavailable"

    def __init__(self, message: str | None = None, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        """Seconds the provider asked us to wait (a 429's `Retry-After`), if it said."""


class RemoteAgentError(RunError):
    """The remote agent server failed or could not be reached."""

    code = "remote_agent_error"


class DelegationError(AgentServerError):
    """The subagent could not be started as asked."""

    # Not a RunError: the parent's run goes on; the message goes back to its model as the
    # `subagent` call's tool error, so it says what to change.
    code = "delegation_refused"


# -- requests against sessions --------------------------------------------------------------------


class NotFoundError(AgentServerError):
    """Not found."""

    code = "not_found"
    http_status = 404


class SessionNotFoundError(NotFoundError):
    """Session not found."""

    code = "session_not_found"


class AgentNotFoundError(NotFoundError):
    """Unknown agent type."""

    code = "agent_not_found"


class ParentSessionNotFoundError(SessionNotFoundError):
    """The parent session is not stored here, and the session id is not its remote child's."""

    code = "parent_session_not_found"


class StreamNotFoundError(NotFoundError):
    """Stream not found."""

    code = "stream_not_found"


class ConflictError(AgentServerError):
    """The request conflicts with the session's current state."""

    code = "conflict"
    http_status = 409


class SessionExistsError(ConflictError):
    """A session with this id already exists."""

    code = "session_exists"


class WriteConflictError(ConflictError):
    """The write conflicts with what is stored: a message or chunk it adds takes a position
    another write took (or a concurrent write created the same session meanwhile)."""

    code = "write_conflict"


class LeaseLostError(ConflictError):
    """This process no longer holds the session's lease: another server runs it now."""

    code = "lease_lost"


class SessionRunningError(ConflictError):
    """The session is running."""

    code = "session_running"


class SessionNotResumableError(ConflictError):
    """The session cannot be resumed in its current state."""

    code = "session_not_resumable"


class AgentMismatchError(ConflictError):
    """The session runs another agent than the request names."""

    code = "agent_mismatch"


class InvalidRequestError(AgentServerError):
    """The request is invalid."""

    code = "invalid_request"
    http_status = 422

    def __init__(
        self, message: str | None = None, *, details: list[dict[str, Any]] | None = None
    ) -> None:
        super().__init__(message)
        self.details = details
        """Per-field problems (`loc`, `msg`), when there are several to tell apart."""


class InvalidSessionIdError(InvalidRequestError):
    """Session ids match ^[A-Za-z0-9._:-]{1,200}$."""

    code = "invalid_session_id"


class InvalidInputError(InvalidRequestError):
    """The input does not fit the agent's input schema or its state schema."""

    code = "invalid_input"


class IdempotencyKeyReusedError(InvalidRequestError):
    """This Idempotency-Key was used with a different request body: use a new key for a new
    request, or send the first body again to get its session."""

    code = "idempotency_key_reused"


class AnswersDoNotFitError(InvalidRequestError):
    """A resume's answers do not fit the calls the paused tree waits for (unknown or missing
    answers, one given twice, a message where answers are due): the document cannot say which
    calls wait, so a body it accepts may still be refused this way."""

    code = "answers_do_not_fit"


class UnsupportedMediaTypeError(AgentServerError):
    """Request bodies are JSON: send `Content-Type: application/json`."""

    code = "unsupported_media_type"
    http_status = 415


# -- infrastructure -------------------------------------------------------------------------------


class StoreError(AgentServerError):
    """The state store failed."""

    code = "store_error"
    http_status = 503


class StoreUnavailableError(StoreError):
    """The state store cannot be reached right now (a lost connection, a timeout, a lock)."""

    code = "store_unavailable"


class StoreRefusedError(StoreError):
    """The state store refused the data it was given (a value it cannot hold, a constraint)."""

    code = "store_refused"


class StoreClosedError(StoreError):
    """The state store is not open."""

    code = "store_closed"


class UnavailableError(AgentServerError):
    """The server is starting or stopping: retry shortly."""

    code = "unavailable"
    http_status = 503


class LifecycleError(AgentServerError, RuntimeError):
    """The object is used outside its lifecycle (not started, or already closed)."""

    code = "lifecycle_error"
