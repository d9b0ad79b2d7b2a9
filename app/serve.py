"""Serving from the environment: the checks a server makes before it serves, and the command.

`build_app()` is what `app.main` serves (`uvicorn app.main:app`): the settings, the log format,
tracing and the agents, read from the environment. A configuration mistake (an unsupported
`DATABASE_URL`, `MODEL_*` without `MODEL_NAME`, an `AGENT_MODULE` that does not import, a bad
value) prints one line and exits with uvicorn's start-up failure code (3), so a supervisor of
several workers stops instead of restarting them forever.

`python -m app.serve` (or the `agent-server` script) is the production command: the same checks,
then the database is opened and migrated once, then uvicorn serves with `WEB_CONCURRENCY`
workers (each a process of its own on the shared socket), a graceful shutdown bounded by
`SHUTDOWN_TIMEOUT`, and Prometheus' multi-process folder made ready when several workers run.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import math
import os
import sys
import tempfile
from typing import NoReturn

from fastapi import FastAPI
from pydantic import ValidationError

from app.errors import DefinitionError, StoreError
from app.observability import logs, metrics, tracing
from app.settings import Settings

EXIT_CONFIGURATION = 3
"""uvicorn's start-up failure code: its worker supervisor stops rather than restarts."""


def configuration_error(exc: BaseException) -> str | None:
    """One line for a configuration mistake (None for anything else)."""
    if isinstance(exc, ValidationError):
        problems = []
        for error in exc.errors(include_url=False, include_input=False):
            name = ".".join(str(part) for part in error["loc"]).upper() or "settings"
            problems.append(f"{name}: {error['msg'].removeprefix('Value error, ')}")
        return "Invalid configuration: " + "; ".join(problems)
    if isinstance(exc, DefinitionError):
        return f"Invalid configuration: {exc.message}"
    return None


def fail(message: str) -> NoReturn:
    """Print `message` as the process's one line (JSON when `LOG_FORMAT=json`) and exit."""
    log_format = os.environ.get("LOG_FORMAT", "").strip().lower()
    print(logs.fatal_line(message, log_format), file=sys.stderr, flush=True)
    raise SystemExit(EXIT_CONFIGURATION)


def load_settings() -> Settings:
    """The settings from the environment, with logging and tracing set up from them."""
    try:
        settings = Settings()
        logs.configure_logging(settings.log_format, settings.log_level)
        tracing.configure_from_env(os.environ)
    except (ValidationError, DefinitionError) as exc:
        fail(configuration_error(exc) or str(exc))
    return settings


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


def build_app() -> FastAPI:
    """The app `uvicorn app.main:app` serves, configured from the environment."""
    from app.api import create_app, load_registry

    settings = load_settings()
    try:
        registry = load_registry(settings.agent_module)
    except DefinitionError as exc:
        fail(configuration_error(exc) or str(exc))
    return create_app(registry, settings=settings, on_started=settle_collector)


async def _open_store(database_url: str) -> None:
    from app.store import create_store

    async with create_store(database_url):
        pass


def check(settings: Settings, workers: int) -> None:
    """What a server can check before it forks its workers: its agents import, its database
    answers (and is migrated, once), and its workers can share it."""
    from app.api import load_registry
    from app.api.startup import startup_failure

    if workers > 1 and settings.database_url.startswith("memory:"):
        fail(
            f"Invalid configuration: WEB_CONCURRENCY={workers} needs a database the workers "
            "share (PostgreSQL): each would have its own memory:// store"
        )
    try:
        load_registry(settings.agent_module)
    except DefinitionError as exc:
        fail(configuration_error(exc) or str(exc))
    try:
        asyncio.run(_open_store(settings.database_url))
    except (DefinitionError, StoreError) as exc:
        fail(startup_failure(exc, settings.database_url) or str(exc))


def prepare_metrics(workers: int) -> None:
    """With several workers, a Prometheus multi-process folder in their environment (a
    temporary one unless `PROMETHEUS_MULTIPROC_DIR` names one); a named one is emptied, with
    any number of workers, so a restarted server does not add its predecessor's values."""
    folder = metrics.multiprocess_dir()
    if folder is None and workers > 1:
        folder = tempfile.mkdtemp(prefix="agent-server-metrics-")
        os.environ[metrics.MULTIPROC_ENV] = folder
    if folder is not None:
        metrics.prepare_multiprocess_dir(folder)


def main(argv: list[str] | None = None) -> None:
    """`python -m app.serve [--host H] [--port P] [--workers N]`: check, then serve."""
    parser = argparse.ArgumentParser(prog="agent-server", description=__doc__)
    parser.add_argument("--host", default=os.environ.get("HOST", "0.0.0.0"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    parser.add_argument("--workers", type=int, help="worker processes (WEB_CONCURRENCY)")
    parser.add_argument(
        "--no-access-log", action="store_true", help="no line per request (uvicorn's access log)"
    )
    args = parser.parse_args(argv)
    settings = load_settings()
    workers = max(args.workers or settings.web_concurrency, 1)
    check(settings, workers)
    prepare_metrics(workers)
    import uvicorn

    uvicorn.run(
        "app.main:app",
        host=args.host,
        port=args.port,
        workers=workers,
        proxy_headers=True,
        timeout_graceful_shutdown=math.ceil(settings.shutdown_timeout),
        # uvicorn's lines go through the handler `load_settings` set up (JSON with LOG_FORMAT).
        log_config=None,
        log_level=settings.log_level.lower(),
        access_log=not args.no_access_log,
    )


if __name__ == "__main__":
    main()
