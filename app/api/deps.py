"""Request dependencies: the runtime the app's lifespan opened. They are `async def` so FastAPI
runs them inline, not in its thread pool."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from app.errors import LifecycleError
from app.runtime import AgentRuntime
from app.settings import Settings


async def get_runtime(request: Request) -> AgentRuntime:
    """The app's runtime (available between start-up and shutdown)."""
    runtime: AgentRuntime | None = getattr(request.app.state, "runtime", None)
    if runtime is None:
        raise LifecycleError("The server is not started")
    return runtime


async def get_settings(request: Request) -> Settings:
    """The app's settings."""
    settings: Settings = request.app.state.settings
    return settings


Runtime = Annotated[AgentRuntime, Depends(get_runtime)]
AppSettings = Annotated[Settings, Depends(get_settings)]
