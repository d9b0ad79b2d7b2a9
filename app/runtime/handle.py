"""What `execute` and `resume` give back: a handle on a run in this process."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import JsonValue

from app.errors import LifecycleError
from app.protocol import Chunk, SessionStatus
from app.runtime.outcome import Outcome

if TYPE_CHECKING:
    from app.runtime.runtime import AgentRuntime


@dataclass(frozen=True, slots=True)
class RunResult:
    """How a run ended."""

    session_id: str
    status: SessionStatus
    output: JsonValue = None
    error: str | None = None


class RunHandle:
    """A run this runtime started or resumed: await its result, or follow its stream."""

    def __init__(self, runtime: AgentRuntime, session_id: str, task: asyncio.Task[Outcome]) -> None:
        self.runtime = runtime
        self.session_id = session_id
        self.stream_id = session_id
        self._task = task

    async def result(self) -> RunResult:
        """Wait for the run to stop (complete, fail, pause or be interrupted)."""
        try:
            outcome = await asyncio.shield(self._task)
        except asyncio.CancelledError:
            if self._task.cancelled():
                raise LifecycleError(
                    f"Session {self.session_id!r} stopped running here before it finished: the "
                    "runtime closed, or the session's lease passed to another server"
                ) from None
            raise
        return RunResult(self.session_id, outcome.status, outcome.output, outcome.error)

    def cancel(self) -> None:
        """Cancel the run's task (the run is given up here without a write)."""
        self._task.cancel()

    async def wait(self) -> None:
        """Wait until the run's task is done, however it ended."""
        await asyncio.gather(self._task, return_exceptions=True)

    def stream(self, from_sequence: int = 0) -> AsyncIterator[Chunk]:
        """The run's chunks after `from_sequence`, live, until the run stops."""
        return self.runtime.follow(self.stream_id, from_sequence=from_sequence).__aiter__()
