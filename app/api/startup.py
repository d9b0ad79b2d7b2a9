"""A start-up that fails on a configuration mistake says so in one line, not a traceback.

When the lifespan fails, Starlette reports the formatted traceback as the failure's message and
uvicorn logs it whole. For the mistakes an operator makes (a database that does not exist or
does not answer, a URL or definition the server cannot use: `StoreError`, `DefinitionError`),
this middleware puts one line in its place; uvicorn then exits with its start-up failure code.
Any other failure keeps its traceback: it is a bug to report.
"""

from __future__ import annotations

import sys

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import DefinitionError, StoreError


def describe_url(database_url: str) -> str:
    """The URL with its password hidden."""
    try:
        return make_url(database_url).render_as_string(hide_password=True)
    except ArgumentError:
        return "(invalid URL)"


def startup_failure(exc: BaseException, database_url: str) -> str | None:
    """The one line for a configuration mistake, or None for anything else."""
    if isinstance(exc, StoreError):
        return f"Cannot start: {exc.message} (DATABASE_URL {describe_url(database_url)})"
    if isinstance(exc, DefinitionError):
        return f"Cannot start: {exc.message}"
    return None


class QuietStartupFailure:
    """Shortens the lifespan's start-up failure message to one line for configuration
    mistakes; every other scope passes straight through."""

    def __init__(self, app: ASGIApp, *, database_url: str) -> None:
        self.app = app
        self.database_url = database_url

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return

        async def quiet_send(message: Message) -> None:
            if message["type"] == "lifespan.startup.failed":
                # Sent from the lifespan's `except` block: the failure is the one being handled.
                line = startup_failure(sys.exc_info()[1] or Exception(), self.database_url)
                if line is not None:
                    message = {**message, "message": line}
            await send(message)

        await self.app(scope, receive, quiet_send)
