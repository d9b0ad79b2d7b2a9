"""`GET /healthz` (the process answers) and `GET /readyz` (its store answers too)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from app.api.deps import runtime_of
from app.api.errors import error_response

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Liveness")
async def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness")
async def readyz(request: Request) -> JSONResponse:
    """The process is up and its store answers (503 otherwise)."""
    try:
        await runtime_of(request).store.find_session_by_idempotency_key("readyz")
    except Exception as exc:
        return error_response(503, "store_unavailable", f"The store does not answer: {exc}")
    return JSONResponse({"status": "ready"})
