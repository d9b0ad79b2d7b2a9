"""What a request handler needs from the app: the runtime its lifespan opened, and its settings.

Handlers take the `Request` and call these, rather than declaring them as FastAPI dependencies:
each `Depends` costs FastAPI a dependency resolution per request (about 80,000 instructions:
the three that `/start` and `/stream` resolved were 2.4% of a peer tree over HTTP)."""

from __future__ import annotations

from fastapi import Request

from app.errors import UnavailableError
from app.runtime import AgentRuntime
from app.settings import Settings


def runtime_of(request: Request) -> AgentRuntime:
    """The app's runtime (available between start-up and shutdown)."""
    runtime: AgentRuntime | None = getattr(request.app.state, "runtime", None)
    if runtime is None:
        raise UnavailableError("The server is not started, or is stopping: retry shortly")
    return runtime


def settings_of(request: Request) -> Settings:
    """The app's settings."""
    settings: Settings = request.app.state.settings
    return settings
