"""What operations cost on the HTTP benchmark, and how it scales with worker processes.

`cost`: the peer tree over HTTP (bench/http_tree.py, PostgreSQL, 100 concurrent trees, L = 50
ms) on two snapshots, interleaved round by round: `base` (a commit before metrics, logs and
traces existed), `head` (metrics and INFO run lines on, tracing off: the default), `head quiet`
(LOG_LEVEL=WARNING: metrics alone), `head traced` (tracing on, OTLP/HTTP to a sink), `head
traced 10%` (the same, sampling one tree in ten: OTEL_TRACES_SAMPLER). `scaling`:
the same benchmark with 1, 2 and 4 worker processes of the server command.

Snapshots (see bench/HTTP.md: app/ moves while you measure):

    git archive <base> | tar -x -C /tmp/snap-base && echo <base> > /tmp/snap-base/COMMIT
    git archive HEAD | tar -x -C /tmp/snap-head && git rev-parse --short HEAD >/tmp/snap-head/COMMIT
    .venv/bin/python bench/ops_cost.py cost --base /tmp/snap-base --head /tmp/snap-head
    .venv/bin/python bench/ops_cost.py scaling --head /tmp/snap-head
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.support import run_command_rounds

KEYS = [
    "trees_per_s",
    "overhead_ratio",
    "tree_p50_ms",
    "tree_p99_ms",
    "server_cpu_ms_per_model_call",
    "server_cpu_s",
    "server_runq_s",
    "client_cpu_s",
    "machine_cores_busy",
]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("mode", choices=["cost", "scaling"])
    parser.add_argument("--base", type=Path, help="snapshot without observability")
    parser.add_argument("--head", type=Path, required=True, help="snapshot to measure")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument("--store", default="postgres")
    args = parser.parse_args()

    def bench(root: Path, *extra: str) -> list[str]:
        script = str(root / "bench" / "http_tree.py")
        return [sys.executable, script, "--store", args.store, "--trees", str(args.trees), *extra]

    if args.mode == "cost":
        if args.base is None:
            parser.error("cost needs --base")
        configs = [
            ("base", bench(args.base)),
            ("head", bench(args.head)),
            ("head quiet", bench(args.head, "--log-level", "WARNING")),
            ("head traced", bench(args.head, "--tracing")),
            ("head traced 10%", bench(args.head, "--tracing", "--trace-ratio", "0.1")),
        ]
    else:
        configs = [
            (
                f"{workers} worker{'s' if workers > 1 else ''}",
                bench(args.head, "--workers", str(workers)),
            )
            for workers in (1, 2, 4)
        ]
    run_command_rounds(configs, args.rounds, KEYS)


if __name__ == "__main__":
    main()
