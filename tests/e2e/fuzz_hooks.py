"""Schemathesis hooks for the fuzz test (loaded through `SCHEMATHESIS_HOOKS`).

One failure is not the server's fault: the document cannot say that an `Idempotency-Key` is
bound to the first body sent with it, so a generated request that reuses a key with another
body is "valid" to the fuzzer and refused by the server (422 `idempotency_key_reused`, as the
IETF idempotency-key draft asks). That refusal, and only it, is not a failure.
"""

from __future__ import annotations

import json

import schemathesis
from schemathesis.core.failures import Failure
from schemathesis.core.transport import Response
from schemathesis.openapi.checks import RejectedPositiveData


def error_code(response: Response) -> str | None:
    """The `error.code` of an answer in the API's error shape, if it is one."""
    try:
        body = json.loads(response.content)
    except ValueError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    return error.get("code") if isinstance(error, dict) else None


@schemathesis.hook
def filter_failure(
    context: schemathesis.HookContext,
    failure: Failure,
    case: schemathesis.Case,
    response: Response,
) -> bool:
    """Keep every failure but a reused idempotency key's 422."""
    reused_key = response.status_code == 422 and error_code(response) == "idempotency_key_reused"
    return not (isinstance(failure, RejectedPositiveData) and reused_key)
