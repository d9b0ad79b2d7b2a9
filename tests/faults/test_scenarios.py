"""The fault-injection invariant over seeded scenarios, on every store.

`FAULT_SCENARIOS` scenarios per store (default 200), from seed `FAULT_SEED` (default 1), eight
at a time (a scenario mostly waits: for leases to expire, for the run to settle). A failure
lists every kind of violation with the seeds that show it; one seed replays alone with
`FAULT_SEED=<seed> FAULT_SCENARIOS=1`. `make faults` runs a larger batch and prints the figures
(`bench/faults.py`).

A scenario is judged once the faults heal: stuck when nothing has moved for `STUCK` seconds,
going round in circles when one call starts `LIVELOCK` times. Both are far above what a takeover
needs on a quiet machine (a lease, 0.4 s), so that a loaded one (coverage, CI's neighbours),
where a takeover takes longer and a late renewal loses a lease, is not read as a stuck run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.runner import first_seed, scenario_count
from tests.faults.summary import run_many

CONCURRENCY = 8


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("backend", ["memory", "sqlite", "postgres"])
async def test_seeded_fault_scenarios_keep_every_invariant(backend: str, tmp_path: Path) -> None:
    seeds = range(first_seed(), first_seed() + scenario_count())
    summary = await run_many(backend, tmp_path, seeds, concurrency=CONCURRENCY)
    print(summary.render())
    assert not summary.failing, summary.render(examples=3)
