"""`GET /metrics`: the server's Prometheus metrics (every worker's, with several)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from fastapi.responses import Response

from app.observability import metrics

router = APIRouter(tags=["operations"])


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}, "description": "The exposition format."}},
)
async def prometheus_metrics() -> Response:
    """Runs, sessions, model and tool calls, store commits, SSE streams, takeovers and remote
    reconnects, in the Prometheus text format (README: Operations)."""
    # Off the loop: with several workers this reads and merges every worker's files.
    body, content_type = await asyncio.to_thread(metrics.render)
    return Response(body, media_type=content_type)
