"""Running agents: the step loop, the stream writer, interrupts, resume and takeover."""

from app.runtime.handle import RunHandle, RunResult
from app.runtime.reader import StreamFollower
from app.runtime.runtime import AgentRuntime

__all__ = ["AgentRuntime", "RunHandle", "RunResult", "StreamFollower"]
