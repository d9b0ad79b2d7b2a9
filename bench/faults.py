"""The fault-injection suite at scale: seeded scenarios on every store, and the figures.

Each scenario (tests/faults/scenario.py) runs an agent tree under injected faults (store writes
and reads that fail or hang, models and tools that raise, hang or return garbage, tool-call ids
reused or omitted, processes crashed, restarted, frozen past their lease, interrupts), heals
them, and checks every invariant of issue 17. Prints, per store, the scenarios run, how many
broke an invariant, and each kind of violation with the seeds that show it (replay one with
`FAULT_SEED=<seed> FAULT_SCENARIOS=1 pytest tests/faults/test_scenarios.py -k <store> -s`).

    python bench/faults.py                                 # 2,000 per store, from seed 1
    python bench/faults.py --scenarios 200 --stores memory --first-seed 5000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.support import temporary_store
from tests.faults.summary import run_many


async def main(stores: list[str], first: int, count: int, concurrency: int) -> int:
    failing = 0
    figures = {}
    for kind in stores:
        async with temporary_store(kind) as url:
            with tempfile.TemporaryDirectory(prefix="faults-") as folder:
                summary = await run_many(
                    kind,
                    Path(folder),
                    range(first, first + count),
                    concurrency=concurrency,
                    url=None if kind == "memory" else url,
                )
        print(summary.render(examples=2), flush=True)
        failing += len(summary.failing)
        figures[kind] = {
            "scenarios": len(summary.reports),
            "seconds": round(summary.wall_seconds, 1),
            "broke_an_invariant": len(summary.failing),
            "by_kind": {kind: len(seeds) for kind, seeds in summary.by_kind().items()},
        }
    print(json.dumps(figures))
    return 1 if failing else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", type=int, default=2000, help="per store")
    parser.add_argument("--stores", default="memory,sqlite,postgres")
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=8)
    options = parser.parse_args()
    sys.exit(
        asyncio.run(
            main(
                options.stores.split(","),
                options.first_seed,
                options.scenarios,
                options.concurrency,
            )
        )
    )
