"""The error answers the operations document, each with what it means, in one table: a route
names the statuses it may answer, and says more where its meaning is narrower.

401 is not here: the document lists it on every protected operation when the server has an
API key, and only then (`app.api.openapi`).
"""

from __future__ import annotations

from typing import Any

from app.protocol.api import ErrorBody

Responses = dict[int | str, dict[str, Any]]
"""FastAPI's `responses` of an operation."""

ERRORS: dict[int, str] = {
    404: "Unknown session, agent type or parent session.",
    409: "The session's state does not allow this.",
    413: "The body is larger than `MAX_BODY_BYTES`.",
    415: "The body is not `application/json`.",
    422: "Invalid body, id, header or input.",
    503: "The store does not answer, or the server is starting or stopping: retry later.",
}
"""Every error an operation of the API may answer, with what it usually means."""


def errors(*statuses: int, meaning: dict[int, str] | None = None) -> Responses:
    """The error answers of an operation: `statuses`, described by `ERRORS` unless `meaning`
    says what they mean for it."""
    said = meaning or {}
    return {
        status: {"model": ErrorBody, "description": said.get(status, ERRORS[status])}
        for status in statuses
    }
