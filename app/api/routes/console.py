"""`/console`: the web console, static files shipped in the package (`app/console/`).

Nothing is built or fetched at run time: the page, its script and its styles are served as
they are, without the API key (the page asks for it and sends it with every call).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse
from starlette.staticfiles import StaticFiles

CONSOLE = Path(__file__).resolve().parents[2] / "console"
"""The console's files."""

router = APIRouter(include_in_schema=False)


@router.get("/console")
async def console() -> FileResponse:
    """The console's page."""
    return FileResponse(CONSOLE / "index.html", headers={"Cache-Control": "no-cache"})


def install_console(app: FastAPI) -> None:
    """Serve `/console` and its files under `/console/`."""
    app.include_router(router)
    app.mount("/console", StaticFiles(directory=CONSOLE), name="console")
