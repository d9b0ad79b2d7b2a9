"""`create_app`: the FastAPI application over an `AgentRuntime` and its store."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import logging
from collections.abc import AsyncIterator

from fastapi import FastAPI

from app.agents import AgentRegistry, RemoteSubAgentTool
from app.api.errors import install_error_handlers
from app.api.middleware import ApiKeyMiddleware, BodyLimitMiddleware
from app.api.openapi import install_openapi
from app.api.routes import agents, health, sessions, stream
from app.errors import DefinitionError
from app.runtime import AgentRuntime
from app.settings import Settings
from app.store import StateStore, create_store

logger = logging.getLogger(__name__)

YOUNG_COLLECTION_THRESHOLD = 50_000
"""Allocations between two collections of the youngest generation (Python's default: 700)."""


def settle_collector() -> None:
    """Tune the garbage collector for serving, once start-up is done.

    What start-up made (modules, schemas, compiled SQL) lives as long as the process: frozen, it
    leaves the collector's full passes, which otherwise stop the loop for tens of milliseconds
    each (about 20% of the CPU of 300 concurrent peer trees). A run allocates many short-lived
    objects and few cycles: collecting the young ones every 700 allocations cost about 5-10% of
    the server's CPU in the peer tree, for nothing it frees that reference counting would not.
    """
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, older, oldest)


DESCRIPTION = """\
Hosts LLM agents and runs them durably. Start a run with `POST /start`, follow it with
`GET /stream/{streamId}` (Server-Sent Events, resumable with `Last-Event-ID`), read it with
`GET /status/{sessionId}`, stop its whole tree with `POST /interrupt/{sessionId}` and continue it
with `POST /resume/{sessionId}`. Every error answers `{"error": {"code", "message"}}`.
"""


def load_registry(spec: str) -> AgentRegistry:
    """The `AgentRegistry` that `package.module:attribute` names."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise DefinitionError(f"AGENT_MODULE must look like package.module:attribute, got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise DefinitionError(
            f"AGENT_MODULE {spec!r}: cannot import {module_name!r}: {exc}"
        ) from exc
    registry = getattr(module, attribute, None)
    if not isinstance(registry, AgentRegistry):
        raise DefinitionError(f"AGENT_MODULE {spec!r} does not name an AgentRegistry")
    return registry


def create_app(registry: AgentRegistry, *, settings: Settings | None = None) -> FastAPI:
    """The HTTP API over `registry`: opens (and migrates) the store named by the settings when it
    starts, takes over sessions whose server is gone, and closes everything when it stops."""
    settings = settings or Settings()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store = create_store(settings.database_url)
        runtime = AgentRuntime(
            registry,
            store=store,
            owner_id=settings.server_id,
            lease_ms=int(settings.lease_seconds * 1000),
            takeover_interval=settings.takeover_interval,
            flush_delay=settings.flush_delay,
        )
        # Built now, off the event loop: the first request for it would block the loop ~0.5 s.
        await asyncio.to_thread(app.openapi)
        async with store, runtime:
            app.state.runtime = runtime
            settle_collector()
            cleanup = asyncio.get_running_loop().create_task(_clean_up_streams(store, settings))
            try:
                yield
            finally:
                cleanup.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await cleanup
                app.state.runtime = None
        await _close_clients(registry)

    app = FastAPI(
        title="Agent server",
        version="0.1.0",
        description=DESCRIPTION,
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.runtime = None
    install_error_handlers(app)
    for module in (sessions, stream, agents, health):
        app.include_router(module.router)
    install_openapi(app)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    if settings.api_key is not None:
        app.add_middleware(ApiKeyMiddleware, api_key=settings.api_key.get_secret_value())
    return app


async def _close_clients(registry: AgentRegistry) -> None:
    """Close what the agents hold open: real models' and remote transports' HTTP clients."""
    holders: list[object] = []
    for agent in registry:
        holders.append(agent.model)
        holders += [t.transport for t in agent.tools if isinstance(t, RemoteSubAgentTool)]
    closed: set[int] = set()
    for holder in holders:
        aclose = getattr(holder, "aclose", None)
        if aclose is not None and id(holder) not in closed:
            closed.add(id(holder))
            await aclose()


async def _clean_up_streams(store: StateStore, settings: Settings) -> None:
    """Delete finished streams' chunks once they are older than the retention, periodically."""
    while True:
        try:
            deleted = await store.delete_finished_streams(
                older_than_ms=int(settings.chunk_retention_hours * 3_600_000)
            )
            if deleted:
                logger.info("Deleted %d chunks of finished streams past retention", deleted)
        except Exception:
            logger.exception("Cleaning up finished streams failed")
        await asyncio.sleep(settings.retention_interval)
