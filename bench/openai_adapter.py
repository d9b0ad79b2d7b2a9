"""What one real-model call costs our process: OpenAIChatModel's client CPU against ScriptedModel's.

The fake OpenAI-compatible server (tests/models/fake_openai.py) runs in a process of its own, so
its CPU is not counted. Each model answers the same response: a short text streamed word by word
and one `add` tool call, with usage. Calls run one after another after a warm-up; the figure is
this process's CPU time (user + system) per call, the median over rounds, with the wall time.

    python bench/openai_adapter.py                 # 7 rounds of 200 calls
    python bench/openai_adapter.py --rounds 3 --calls 50
    python bench/openai_adapter.py --words 300     # a long reply: the cost per streamed chunk
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.models import (  # noqa: E402
    Model,
    ModelRequest,
    ModelResponse,
    ScriptedModel,
    ToolCall,
    ToolSpec,
    Usage,
)
from app.models.openai import OpenAIChatModel  # noqa: E402
from app.models.retry import RetryingModel  # noqa: E402
from app.protocol import UserMessage  # noqa: E402
from tests.models.fake_openai import BENCH_CALL, MODEL, bench_text  # noqa: E402

REQUEST = ModelRequest(
    session_id="bench",
    agent_type="adder",
    system_prompt="You add numbers with the add tool.",
    messages=(UserMessage(content="What is 2 + 3?"),),
    tools=(
        ToolSpec(
            name="add",
            description="Add two integers.",
            parameters={
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        ),
    ),
    step=1,
)


def scripted_response(words: int) -> ModelResponse:
    """The server's reply, for ScriptedModel to play."""
    call = ToolCall(BENCH_CALL.name, json.loads(BENCH_CALL.arguments), id=BENCH_CALL.id)
    return ModelResponse(text=bench_text(words), tool_calls=(call,), usage=Usage(21, 9))


async def one_call(model: Model) -> int:
    events = 0
    async for _ in model.stream(REQUEST):
        events += 1
    return events


async def measure(model: Model, *, rounds: int, calls: int, warmup: int) -> dict[str, float]:
    """Median CPU and wall milliseconds per call over `rounds` rounds of `calls` calls."""
    expected = await one_call(model)
    for _ in range(warmup):
        await one_call(model)
    cpu: list[float] = []
    wall: list[float] = []
    for _ in range(rounds):
        cpu_start, wall_start = time.process_time(), time.perf_counter()
        for _ in range(calls):
            if await one_call(model) != expected:
                raise RuntimeError(f"{model.name} streamed a different number of events")
        cpu.append((time.process_time() - cpu_start) * 1000 / calls)
        wall.append((time.perf_counter() - wall_start) * 1000 / calls)
    return {
        "events_per_call": expected,
        "cpu_ms_per_call": statistics.median(cpu),
        "cpu_ms_min": min(cpu),
        "cpu_ms_max": max(cpu),
        "wall_ms_per_call": statistics.median(wall),
    }


def start_server(words: int) -> tuple[subprocess.Popen[str], str]:
    """The fake server in its own process, and its API root."""
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.models.fake_openai", "--port", "0", "--words", str(words)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    line = server.stdout.readline()
    if not line.startswith("listening "):
        server.terminate()
        raise RuntimeError(f"the fake server did not start: {line!r}")
    return server, line.split()[1]


async def run(args: argparse.Namespace, base_url: str) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    options = {"rounds": args.rounds, "calls": args.calls, "warmup": args.warmup}
    factories: list[tuple[str, Callable[[], Model]]] = [
        ("ScriptedModel", lambda: ScriptedModel([scripted_response(args.words)])),
        ("OpenAIChatModel", lambda: OpenAIChatModel(MODEL, base_url=base_url)),
        (
            "RetryingModel(OpenAIChatModel)",
            lambda: RetryingModel(OpenAIChatModel(MODEL, base_url=base_url)),
        ),
    ]
    for label, factory in factories:
        model = factory()
        try:
            rows.append({"model": label, **await measure(model, **options)})
        finally:
            aclose = getattr(model, "aclose", None)
            if aclose is not None:
                await aclose()
    return rows


def main() -> None:
    """Run the bench and print a table, then one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--words", type=int, default=0, help="a longer reply text, in words")
    args = parser.parse_args()
    server, base_url = start_server(args.words)
    try:
        rows = asyncio.run(run(args, base_url))
    finally:
        server.terminate()
        server.wait(timeout=10)
    print(f"{'model':<32} {'events':>6} {'cpu ms/call':>12} {'(min-max)':>15} {'wall ms':>8}")
    for row in rows:
        span = f"{row['cpu_ms_min']:.3f}-{row['cpu_ms_max']:.3f}"
        print(
            f"{row['model']:<32} {row['events_per_call']:>6} {row['cpu_ms_per_call']:>12.3f} "
            f"{span:>15} {row['wall_ms_per_call']:>8.3f}"
        )
    print(
        json.dumps(
            {"bench": "openai_adapter", "rounds": args.rounds, "calls": args.calls, "rows": rows}
        )
    )


if __name__ == "__main__":
    main()
