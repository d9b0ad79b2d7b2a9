"""The OpenAPI document, with the stream's chunk types, which no JSON route returns, added."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from app.protocol import CHUNK_ADAPTER


def install_openapi(app: FastAPI) -> None:
    """Serve an OpenAPI document whose components include every chunk type as `Chunk`."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=app.routes,
        )
        schema = CHUNK_ADAPTER.json_schema(
            by_alias=True, ref_template="#/components/schemas/{model}"
        )
        components = document.setdefault("components", {}).setdefault("schemas", {})
        components.update(schema.pop("$defs", {}))
        components["Chunk"] = schema
        app.openapi_schema = document
        return document

    app.openapi = openapi  # type: ignore[method-assign]
