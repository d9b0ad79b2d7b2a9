"""`create_remote_sub_agent_tool`: an agent on another server, offered as a `subagent__` tool."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel

from app.agents.agent import AGENT_NAME, AGENT_NAME_PATTERN
from app.agents.subagent import SUBAGENT_TOOL_PREFIX
from app.agents.tools import Offered, check_schema
from app.errors import DefinitionError
from app.protocol import Chunk
from app.protocol.api import SessionStatusView, StartResponse


@runtime_checkable
class RemoteAgentTransport(Protocol):
    """How a remote sub-agent reaches its server (`HttpRemoteAgentTransport` over HTTP + SSE)."""

    async def start(
        self,
        agent_type: str,
        *,
        session_id: str,
        message: str,
        input: Any = None,
        parent_session_id: str | None = None,
    ) -> StartResponse:
        """Start the remote session (idempotent for one session id)."""

    def stream(self, session_id: str, from_sequence: int = 0) -> AsyncIterator[Chunk]:
        """Its chunks after `from_sequence`, until its run stops."""

    async def get_status(self, session_id: str) -> SessionStatusView | None:
        """Its status, or None if the remote server does not know it."""

    async def interrupt(self, session_id: str, reason: str | None = None) -> None:
        """Stop it and its tree."""

    async def resume(
        self,
        session_id: str,
        *,
        tool_results: Sequence[Mapping[str, Any]] | None = None,
        approvals: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        """Resume it after an interrupt, or answer what its paused tree waits for (items as
        `POST /resume` takes them: `sessionId`, `toolCallId`, and `result` or `approved`)."""


@dataclass(frozen=True, eq=False)
class RemoteSubAgentTool(Offered):
    """A tool whose call runs `remote_agent_type` on another server and returns its output."""

    tool_name: str
    description: str
    input_schema: type[BaseModel]
    output_schema: type[BaseModel]
    transport: RemoteAgentTransport
    remote_agent_type: str
    timeout: float | None = None

    @property
    def name(self) -> str:
        """`subagent__<name>`."""
        return SUBAGENT_TOOL_PREFIX + self.tool_name


def create_remote_sub_agent_tool(
    name: str,
    *,
    description: str,
    input_schema: type[BaseModel],
    output_schema: type[BaseModel],
    transport: RemoteAgentTransport,
    remote_agent_type: str,
    timeout: float | None = None,
) -> RemoteSubAgentTool:
    """Offer the agent `remote_agent_type` of another server as the tool `subagent__<name>`.

    Its chunks stream into the caller's stream between `subagent_start` and `subagent_end`; its
    output is validated against `output_schema`. The server's URL lives in `transport`, which
    comes from server-side code, never from a request. `timeout` (seconds) bounds the call.
    """
    if not isinstance(name, str) or not AGENT_NAME.fullmatch(name):
        raise DefinitionError(f"Remote sub-agent name {name!r} must match {AGENT_NAME_PATTERN}")
    owner = f"Remote sub-agent {name!r}"
    check_schema(owner, "input_schema", input_schema)
    check_schema(owner, "output_schema", output_schema)
    if not isinstance(transport, RemoteAgentTransport):
        raise DefinitionError(
            f"{owner}: transport must be a RemoteAgentTransport, got {transport!r}"
        )
    if not isinstance(remote_agent_type, str) or not remote_agent_type:
        raise DefinitionError(f"{owner}: remote_agent_type must be a non-empty string")
    if timeout is not None and timeout <= 0:
        raise DefinitionError(f"{owner}: timeout must be positive")
    return RemoteSubAgentTool(
        tool_name=name,
        description=description,
        input_schema=input_schema,
        output_schema=output_schema,
        transport=transport,
        remote_agent_type=remote_agent_type,
        timeout=timeout,
    )
