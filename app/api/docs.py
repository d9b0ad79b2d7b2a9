"""The API's docs page (`/docs`), served with Swagger UI's own files: no CDN, so it works offline.

The files come from the `swagger-ui-py` package, found on disk without importing it (its import
pulls in template engines the server does not need).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

from app.errors import DefinitionError

ASSETS = "/docs/assets"
"""Where Swagger UI's scripts and styles are served."""


def swagger_ui_folder() -> Path:
    """The folder of Swagger UI's distribution files in the installed `swagger-ui-py`."""
    spec = importlib.util.find_spec("swagger_ui")
    if spec is None or not spec.submodule_search_locations:
        raise DefinitionError("The swagger-ui-py package is missing: reinstall the server")
    return Path(next(iter(spec.submodule_search_locations))) / "static"


def install_docs(app: FastAPI) -> None:
    """Serve `/docs` (create the app with `docs_url=None`) and its assets from this server."""
    folder = swagger_ui_folder()
    app.mount(ASSETS, StaticFiles(directory=folder), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} - docs",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon-32x32.png",
        )
