"""Running agents: the step loop, the stream writer, interrupts, resume and takeover."""

from app.runtime.reader import StreamFollower
from app.runtime.runtime import AgentRuntime, RunHandle, RunResult

__all__ = ["AgentRuntime", "RunHandle", "RunResult", "StreamFollower"]
