"""How long to wait before trying again: jittered exponential backoff, shared by everything that
retries (model calls, remote agent servers)."""

from __future__ import annotations

import random


def backoff_delay(attempt: int, base: float, ceiling: float) -> float:
    """Seconds to wait after failed attempt `attempt` (from 1): about `base * 2 ** (attempt - 1)`,
    at most `ceiling`, between half of it and all of it."""
    top = min(base * 2.0 ** (attempt - 1), ceiling)
    # Half fixed, half random: callers that failed together spread out, yet always back off.
    return top / 2 + random.uniform(0, top / 2)
