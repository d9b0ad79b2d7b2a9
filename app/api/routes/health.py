"""`GET /healthz` (the process answers) and `GET /readyz` (its store answers too)."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from app.api.deps import runtime_of
from app.api.documented import errors
from app.api.errors import error_response
from app.api.routing import ApiRoute
from app.errors import AgentServerError

logger = logging.getLogger(__name__)

router = APIRouter(tags=["health"], route_class=ApiRoute)


@router.get("/healthz", summary="Liveness")
async def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@router.get(
    "/readyz",
    summary="Readiness",
    responses=errors(
        503,
        meaning={
            503: "Not ready: the store does not answer, or the server is starting or stopping."
        },
    ),
)
async def readyz(request: Request) -> JSONResponse:
    """The process is up and its store answers (503 otherwise)."""
    try:
        await runtime_of(request).store.ping()
    except AgentServerError as exc:
        # The store's message names hosts and databases: the log has it, the caller does not.
        logger.error("Readiness check failed: the store does not answer: %s", exc.message)
        return error_response(503, "store_unavailable", "The state store does not answer")
    return JSONResponse({"status": "ready"})
