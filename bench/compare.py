"""Our runtime and the peers (../shared/peer-bench) on the same agent tree, in the same sitting.

Every (scenario, config) runs as a fresh subprocess, interleaved round by round in a rotated
order, as the peers' own run_all.py does; the table gives medians, and each config's wall time
against LangGraph-without-checkpointer in the same round (the only comparison a shared, noisy
machine allows). The peers need their own venv (see ../shared/peer-bench/README.md):

    python bench/compare.py --rounds 5 --peer-python /tmp/peerbench/venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PEERS = ROOT.parent / "shared" / "peer-bench"
OURS = [sys.executable, str(ROOT / "bench" / "peer_tree.py")]
SCENARIOS = {
    "seq200_L0": ["--scenario", "seq", "--trees", "200"],
    "conc50_L0": ["--scenario", "conc", "--trees", "50"],
    "conc100_L50": ["--scenario", "conc", "--trees", "100", "--latency-ms", "50"],
    "seq10_L50": ["--scenario", "seq", "--trees", "10", "--latency-ms", "50"],
}
BASE = "langgraph/none"


def configs(peer_python: str, dsn: str) -> dict[str, list[str]]:
    """Config name -> the command that runs it (scenario arguments are appended)."""
    langgraph = [peer_python, str(PEERS / "langgraph_peer.py")]
    return {
        "agent-server/memory": [*OURS, "--store", "memory"],
        "agent-server/sqlite": [*OURS, "--store", "sqlite"],
        "agent-server/postgres": [*OURS, "--store", "postgres"],
        "langgraph/none": langgraph,
        "langgraph/pg-sync": [
            *langgraph,
            "--checkpointer",
            "postgres",
            "--durability",
            "sync",
            "--dsn",
            dsn,
        ],
        "langgraph/pg-async": [*langgraph, "--checkpointer", "postgres", "--dsn", dsn],
        "pydantic-ai/none": [peer_python, str(PEERS / "pydantic_ai_peer.py")],
    }


def run(
    rounds: int, commands: dict[str, list[str]], scenarios: list[str]
) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    names = list(commands)
    for round_ in range(rounds):
        for scenario in scenarios:
            order = names[round_ % len(names) :] + names[: round_ % len(names)]
            for name in order:
                command = [*commands[name], *SCENARIOS[scenario]]
                done = subprocess.run(command, capture_output=True, text=True, check=False)
                if done.returncode != 0:
                    sys.exit(f"{name} {scenario} failed:\n{done.stderr[-3000:]}")
                row = json.loads(done.stdout.strip().splitlines()[-1])
                row.update(round=round_, config=name, scenario_name=scenario, ts=time.time())
                rows.append(row)
                print(
                    f"round {round_} {scenario:12s} {name:22s} wall={row['wall_s']:.3f}s "
                    f"load={row['loadavg']:.2f}",
                    file=sys.stderr,
                )
    return rows


def _median(values: list[object]) -> float | None:
    numbers = [float(v) for v in values if isinstance(v, int | float)]
    return statistics.median(numbers) if numbers else None


def _cell(value: float | None, digits: int) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def report(rows: list[dict[str, object]]) -> None:
    print(
        "| scenario | config | trees/s | ms/model call | CPU ms/model call | overhead ratio "
        "| vs langgraph/none, same round | peak RSS MiB | n |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    scenarios = list(dict.fromkeys(str(r["scenario_name"]) for r in rows))
    names = list(dict.fromkeys(str(r["config"]) for r in rows))
    for scenario in scenarios:
        mine = [r for r in rows if r["scenario_name"] == scenario]
        for name in names:
            runs = [r for r in mine if r["config"] == name]
            if not runs:
                continue
            ratios = []
            for r in runs:
                base = [b for b in mine if b["config"] == BASE and b["round"] == r["round"]]
                if base:
                    ratios.append(float(r["wall_s"]) / float(base[0]["wall_s"]))  # type: ignore[arg-type]
            versus = _median(ratios)  # type: ignore[arg-type]
            print(
                f"| {scenario} | {name} | {_cell(_median([r['trees_per_s'] for r in runs]), 1)} "
                f"| {_cell(_median([r['ms_per_model_call'] for r in runs]), 3)} "
                f"| {_cell(_median([r['proc_cpu_ms_per_model_call'] for r in runs]), 3)} "
                f"| {_cell(_median([r['overhead_ratio'] for r in runs]), 2)} "
                f"| {'' if versus is None else f'{versus:.3f}x'} "
                f"| {_cell(_median([r['peak_rss_mib'] for r in runs]), 0)} | {len(runs)} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--peer-python", default="/tmp/peerbench/venv/bin/python")
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/peerbench")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--configs", default="")
    parser.add_argument("--out", default="")
    parser.add_argument("--report", default="", help="only print the table of a saved run")
    args = parser.parse_args()
    if args.report:
        report([json.loads(line) for line in Path(args.report).read_text().splitlines()])
        return
    commands = configs(args.peer_python, args.dsn)
    if args.configs:
        commands = {name: commands[name] for name in args.configs.split(",")}
    rows = run(args.rounds, commands, args.scenarios.split(","))
    if args.out:
        Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in rows))
    report(rows)


if __name__ == "__main__":
    main()
