"""Instructions per peer tree, counted by callgrind: a figure the machine's load does not move.

Wall and CPU times on these shared machines move by 20-50% between sittings, and by 10-20%
between two runs of the same code (bench/HTTP.md); the instructions the same code executes for
the same work move by well under 1%. This counts them for 100 concurrent peer trees (the tree of
bench/peer_tree.py, 50 ms model latency), under `valgrind --tool=callgrind` with counting switched
on only around the trees: imports, start-up and warm-up are left out.

    python bench/instructions.py --target memory     # in-process, memory store
    python bench/instructions.py --target postgres   # in-process, a fresh PostgreSQL database
    python bench/instructions.py --target http       # the app over ASGI (POST /start, GET /stream)

`http` drives `create_app` through httpx's ASGI transport in one process, so uvicorn and the
sockets are not counted and the client's own instructions are. With `--tracing`, spans are
made, batched and encoded to OTLP protobuf (not sent: the HTTP post is left out); with `--logs
text|json`, the server's log lines (INFO: a line per run start and end) are formatted and written
to /dev/null. Neither is on by default, as in a server without OTEL_* and LOG_LEVEL=WARNING.
Under valgrind the process runs some 40 times slower while the model's latency does not, so
more work meets at each phase of the tree (larger commit groups) than in a timed run. Compare
counts of two commits, not counts with times, and only on machines of one kind. A run takes
20-40 s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import peer_tree

from app import AgentRuntime
from app.api.app import create_app
from app.serve import settle_collector
from app.settings import Settings
from app.store import create_store

TARGETS = ("memory", "postgres", "http")
WARM_UP = 10


def _count(on: bool) -> None:
    """Switch callgrind's counting for this process on or off."""
    subprocess.run(
        ["callgrind_control", "--instr=" + ("on" if on else "off"), str(os.getpid())],
        check=True,
        capture_output=True,
    )


async def _in_process(kind: str, trees: int) -> None:
    registry = peer_tree.build_registry(0.05)
    with tempfile.TemporaryDirectory() as tmp:
        async with peer_tree.store_url(kind, tmp) as url:
            store = create_store(url)
            async with store, AgentRuntime(registry, store=store, takeover_interval=None) as rt:
                settle_collector()
                await asyncio.gather(*(peer_tree.run_tree(rt) for _ in range(WARM_UP)))
                _count(True)
                await asyncio.gather(*(peer_tree.run_tree(rt) for _ in range(trees)))
                _count(False)


async def _http_tree(client: httpx.AsyncClient) -> None:
    started = await client.post("/start", json={"agentType": "parent", "message": "go"})
    stream = await client.get(f"/stream/{started.json()['streamId']}")
    if b'event: end\r\ndata: {"status": "completed"}' not in stream.content:
        raise RuntimeError(f"the tree did not complete: {stream.content[-300:]!r}")


def _observe(tracing: bool, logs: str) -> None:
    """Turn on what a server's environment would: tracing, and log lines at INFO."""
    if logs != "none":
        from app.observability.logs import configure_logging

        configure_logging(logs, "INFO", stream=open(os.devnull, "w"))  # type: ignore[arg-type]  # noqa: SIM115
    if tracing:
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )

        from app.observability import tracing as traces

        class Encoding(SpanExporter):
            def export(self, spans: object) -> SpanExportResult:
                encode_spans(spans).SerializeToString()  # type: ignore[arg-type]
                return SpanExportResult.SUCCESS

        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(Encoding()))
        traces.install(provider)


async def _over_asgi(trees: int) -> None:
    os.environ.setdefault("BENCH_LATENCY_MS", "50")
    from bench.agents import registry  # after the latency is set: it reads it at import

    app = create_app(
        registry, settings=Settings(database_url="memory://"), on_started=settle_collector
    )
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://bench") as client,
    ):
        await asyncio.gather(*(_http_tree(client) for _ in range(WARM_UP)))
        _count(True)
        await asyncio.gather(*(_http_tree(client) for _ in range(trees)))
        _count(False)


def _measure(target: str, trees: int, extra: list[str]) -> int:
    """Run this script's child under callgrind; the instructions it counted."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    with tempfile.TemporaryDirectory() as tmp:
        command = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={tmp}/callgrind.out",
            sys.executable,
            __file__,
            "--child",
            "--target",
            target,
            "--trees",
            str(trees),
            *extra,
        ]
        finished = subprocess.run(command, capture_output=True, text=True, check=False)
        collected = re.search(r"Collected : (\d+)", finished.stderr)
        if finished.returncode != 0 or collected is None:
            raise SystemExit(f"the counted run failed:\n{finished.stderr[-3000:]}")
        return int(collected.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", choices=TARGETS, default="memory")
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument("--runs", type=int, default=1, help="counted runs (they agree to <1%%)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tracing", action="store_true", help="spans made and encoded")
    parser.add_argument("--logs", choices=["none", "text", "json"], default="none")
    args = parser.parse_args()
    if args.child:
        _observe(args.tracing, args.logs)
        if args.target == "http":
            asyncio.run(_over_asgi(args.trees))
        else:
            asyncio.run(_in_process(args.target, args.trees))
        return
    extra = ["--logs", args.logs] + (["--tracing"] if args.tracing else [])
    label = args.target + (" tracing" if args.tracing else "") + f" logs={args.logs}"
    for _ in range(args.runs):
        total = _measure(args.target, args.trees, extra)
        print(f"{label}: {total / args.trees / 1e6:.3f}M instructions per tree")


if __name__ == "__main__":
    main()
