"""Schemathesis hooks for the fuzz test (loaded through `SCHEMATHESIS_HOOKS`).

Two refusals are not the server's fault, as the document cannot express what they depend on:
an `Idempotency-Key` is bound to the first body sent with it, so a generated request that
reuses a key with another body is "valid" to the fuzzer and refused by the server (422
`idempotency_key_reused`, as the IETF idempotency-key draft asks); and a resume of a paused
tree must answer exactly the calls it waits for, which depend on the run (422
`answers_do_not_fit`). Those refusals, and only they, are not failures.
"""

from __future__ import annotations

import json

import schemathesis
from schemathesis.core.failures import Failure
from schemathesis.core.transport import Response
from schemathesis.openapi.checks import RejectedPositiveData

STATEFUL_REFUSALS = frozenset({"idempotency_key_reused", "answers_do_not_fit"})


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
    """Keep every failure but those two 422s."""
    stateful = response.status_code == 422 and error_code(response) in STATEFUL_REFUSALS
    return not (isinstance(failure, RejectedPositiveData) and stateful)
