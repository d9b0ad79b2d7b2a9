"""`create_app`: the FastAPI application over an `AgentRuntime` and its store."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
from collections.abc import AsyncIterator, Callable

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware

from app.agents import AgentRegistry, RemoteSubAgentTool
from app.api.docs import install_docs
from app.api.errors import install_error_handlers
from app.api.middleware import ApiKeyMiddleware, BodyLimitMiddleware
from app.api.openapi import install_openapi
from app.api.routes import (
    agents,
    chat,
    health,
    history,
    metrics,
    protocols,
    sessions,
    stream,
    tokens,
)
from app.api.routes.console import install_console
from app.api.startup import QuietStartupFailure
from app.api.tokens import StreamTokens
from app.api.worker import Worker
from app.errors import DefinitionError
from app.observability import tracing
from app.runtime import AgentRuntime
from app.runtime.scheduler import BackgroundSettings
from app.settings import Settings
from app.store import DatabaseTimeouts, StateStore, create_store

logger = logging.getLogger(__name__)

DESCRIPTION = """\
Hosts LLM agents and runs them durably. Start a run with `POST /start`, follow it with
`GET /stream/{streamId}` (Server-Sent Events, resumable with `Last-Event-ID`), read it with
`GET /status/{sessionId}`, stop its whole tree with `POST /interrupt/{sessionId}` and continue it
with `POST /resume/{sessionId}`. Bodies are JSON (`Content-Type: application/json`). Every error
answers `{"error": {"code", "message"}}` with a stable `code` (the README lists them).
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


def create_app(
    registry: AgentRegistry,
    *,
    settings: Settings | None = None,
    on_started: Callable[[], None] | None = None,
) -> FastAPI:
    """The HTTP API over `registry`: opens (and migrates) the store named by the settings when it
    starts, takes over sessions whose server is gone, and closes everything when it stops.
    `on_started` is called once it has started (the server command tunes the process there;
    the app itself changes nothing process-wide)."""
    settings = settings or Settings()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        worker = Worker(settings.server_id, settings.database_url)
        timeouts = DatabaseTimeouts(
            connect=settings.database_connect_timeout, statement=settings.database_timeout
        )
        store = create_store(settings.database_url, timeouts=timeouts)
        runtime = AgentRuntime(
            registry,
            store=store,
            owner_id=worker.owner_id,
            lease_ms=int(settings.lease_seconds * 1000),
            takeover_interval=settings.takeover_interval,
            flush_delay=settings.flush_delay,
            shutdown_timeout=settings.shutdown_timeout,
            background=BackgroundSettings(
                concurrency=settings.background_concurrency,
                poll=settings.background_poll,
                timeout=settings.subagent_timeout,
            ),
        )
        # Built now, off the event loop: the first request for it would block the loop ~0.5 s.
        await asyncio.to_thread(app.openapi)
        async with worker, store, runtime:
            app.state.runtime = runtime
            if on_started is not None:
                on_started()
            cleanup = asyncio.get_running_loop().create_task(_clean_up_streams(store, settings))
            try:
                yield
            finally:
                cleanup.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await cleanup
                app.state.runtime = None
        await _close_clients(registry)

    # No redirect from `/start/` to `/start`: a bare 307 tells a client nothing, and a POST
    # redirected loses its body in many clients. Such paths are 404s that name the right path.
    app = FastAPI(
        title="Agent server",
        version="0.1.0",
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        redirect_slashes=False,
    )
    api_key = settings.api_key.get_secret_value() if settings.api_key is not None else None
    stream_tokens = StreamTokens.for_api_key(api_key, ttl_seconds=settings.stream_token_seconds)
    app.state.settings = settings
    app.state.runtime = None
    app.state.stream_tokens = stream_tokens
    install_error_handlers(app)
    for module in (sessions, stream, tokens, protocols, chat, history, agents, health, metrics):
        app.include_router(module.router)
    install_openapi(app, registry, bearer=settings.api_key is not None)
    install_docs(app)
    install_console(app)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    if api_key is not None:
        app.add_middleware(ApiKeyMiddleware, api_key=api_key, stream_tokens=stream_tokens)
    if tracing.tracer is not None:
        app.add_middleware(tracing.TraceContextMiddleware)
    app.add_middleware(QuietStartupFailure, database_url=settings.database_url)
    install_cors(app, settings)
    return app


def install_cors(app: FastAPI, settings: Settings) -> None:
    """Let pages of `CORS_ORIGINS` call the API. Added last, so it is the outermost layer: a
    preflight is answered before the API key is asked for, and errors carry the CORS headers."""
    origins = settings.cors_origin_list
    if not origins:
        return
    app.add_middleware(
        CORSMiddleware,
        allow_origins=origins,
        allow_credentials=settings.cors_allow_credentials and "*" not in origins,
        allow_methods=["GET", "POST", "OPTIONS"],
        allow_headers=["Authorization", "Content-Type", "Idempotency-Key", "Last-Event-ID"],
        max_age=600,
    )


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
