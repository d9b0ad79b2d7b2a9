"""Running many seeded scenarios on one store, and the figures they give."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tests.faults.runner import Report, open_bed, run_scenario
from tests.faults.scenario import generate


@dataclass
class Summary:
    """Scenarios run on one store and the violations they found."""

    backend: str
    reports: list[Report] = field(default_factory=list)
    wall_seconds: float = 0.0

    @property
    def failing(self) -> list[Report]:
        """The scenarios that broke an invariant."""
        return [report for report in self.reports if report.violations]

    def by_kind(self) -> dict[str, list[int]]:
        """For each kind of violation, the seeds of the scenarios that showed it."""
        seeds: dict[str, list[int]] = defaultdict(list)
        for report in self.reports:
            for kind in sorted({v.kind for v in report.violations}):
                seeds[kind].append(report.seed)
        return dict(sorted(seeds.items(), key=lambda item: -len(item[1])))

    def render(self, *, examples: int = 2) -> str:
        """The figures, then each kind with its first seeds and an example."""
        seconds = sum(report.seconds for report in self.reports)
        injected: Counter[str] = Counter()
        for report in self.reports:
            injected.update(report.injected)
        lines = [
            f"{self.backend}: {len(self.reports)} scenarios in {self.wall_seconds:.1f}s "
            f"({seconds:.1f}s of scenario time), {len(self.failing)} broke an invariant",
            f"  faults injected: {dict(sorted(injected.items()))}",
        ]
        by_seed = {report.seed: report for report in self.reports}
        for kind, seeds in self.by_kind().items():
            lines.append(f"  {kind}: {len(seeds)} scenarios, seeds {seeds[:12]}")
            for seed in seeds[:examples]:
                example = next(v for v in by_seed[seed].violations if v.kind == kind)
                lines.append(f"    seed {seed}: {example.detail[:300]}")
                lines.append(f"      scenario: {by_seed[seed].description}")
        return "\n".join(lines)


async def run_many(
    backend: str,
    folder: Path,
    seeds: Iterable[int],
    *,
    concurrency: int = 1,
    url: str | None = None,
    on_report: Callable[[Report], None] | None = None,
) -> Summary:
    """Run the scenarios of `seeds` on one bed of `backend`, `concurrency` at a time (they are
    kept apart by their ids; most of a scenario's time is spent waiting for leases). The
    runtime's own error logs (a failed run's traceback) are expected here and silenced."""
    summary = Summary(backend)
    started = time.monotonic()
    # The runtime's tracebacks of failed runs, and asyncio's "Task exception was never
    # retrieved" for taken-over runs nobody awaits, are what the faults are expected to cause.
    quiet = [logging.getLogger("app"), logging.getLogger("asyncio")]
    levels = [logger.level for logger in quiet]
    for logger in quiet:
        logger.setLevel(logging.CRITICAL)
    try:
        async with open_bed(backend, folder, url=url) as bed:
            gate = asyncio.Semaphore(concurrency)

            async def one(seed: int) -> Report:
                async with gate:
                    report = await run_scenario(bed, generate(seed))
                if on_report is not None:
                    on_report(report)
                return report

            reports = await asyncio.gather(*(one(seed) for seed in seeds))
            summary.reports = sorted(reports, key=lambda report: report.seed)
    finally:
        for logger, level in zip(quiet, levels, strict=True):
            logger.setLevel(level)
        summary.wall_seconds = time.monotonic() - started
    return summary
