"""The console's frame time while a stream delivers `--rate` chunks/s (default 20,000).

A stand-in server (this process) serves the real console files and just enough API for one
session (`/agents`, `/sessions`, `/status`), and a `/stream` that sends a tree's chunks (a root
and `--agents` sub-agents taking turns: text deltas, and a tool call every 50 chunks) paced at
`--rate` for `--seconds`, one SSE write per 10 ms tick, then `event: end`. Headless Chromium
(playwright-core, tests/js/console_frames.mjs) opens the console on it and reports what the page
measured for each animation frame: the interval since the previous frame and the time the
frame's work took (parse what arrived, update the model, update the DOM).

It prints one JSON line: the chunks the page applied and the rate they were sent at, frame
intervals and work times (p50, p95, p99, max, ms), and frames over 50 ms. A frame interval near
16.7 ms at 60 Hz means the page kept up; long work means a janky page.

    .venv/bin/python bench/console_frames.py
    .venv/bin/python bench/console_frames.py --rate 50000 --seconds 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from app.api.routes.console import CONSOLE

ROOT = Path(__file__).resolve().parents[1]
JS = ROOT / "tests" / "js"
SESSION = "bench"
TICK = 0.01


def chunks(total: int, agents: int) -> list[bytes]:
    """The stream's SSE messages: sub-agents start, take turns streaming text (a tool call
    every 50 chunks), end; then the root's output."""
    out: list[dict[str, object]] = []

    def add(agent: str, kind: str, **fields: object) -> None:
        out.append(
            {
                "type": kind,
                "sequence": len(out) + 1,
                "agentId": agent,
                "agentType": "a",
                "step": 1,
                "timestamp": 0,
                **fields,
            }
        )

    children = [f"{SESSION}-sub-{i}" for i in range(agents)]
    for i, child in enumerate(children):
        add(SESSION, "tool_start", toolCallId=f"c{i}", toolName="subagent__a", arguments={})
        add(SESSION, "subagent_start", subAgentType="a", subSessionId=child, callId=f"c{i}")
    turn = 0
    while len(out) < total - 3 * agents - 1:
        agent = children[turn % agents] if agents else SESSION
        turn += 1
        if turn % 50 == 0:
            add(
                agent,
                "tool_start",
                toolCallId=f"t{turn}",
                toolName="measure",
                arguments={"n": turn},
            )
            add(
                agent,
                "tool_end",
                toolCallId=f"t{turn}",
                toolName="measure",
                result=turn,
                error=None,
            )
        else:
            add(agent, "text_delta", delta=f"word{turn % 97} ")
    for i, child in enumerate(children):
        add(
            SESSION, "subagent_end", subAgentType="a", subSessionId=child, callId=f"c{i}", result={}
        )
        add(SESSION, "tool_end", toolCallId=f"c{i}", toolName="subagent__a", result={}, error=None)
    add(SESSION, "output", output="done")
    return [
        b"id: %d\r\ndata: %s\r\n\r\n" % (c["sequence"], orjson.dumps(c))
        for c in out  # type: ignore[str-bytes-safe]
    ]


def stand_in(messages: list[bytes], rate: float, sent: dict[str, float]) -> Starlette:
    async def page(request: Request) -> FileResponse:
        return FileResponse(CONSOLE / "index.html")

    async def agents(request: Request) -> JSONResponse:
        return JSONResponse([])

    async def sessions(request: Request) -> JSONResponse:
        summary = {"sessionId": SESSION, "agentType": "a", "status": "running", "createdAt": 0}
        return JSONResponse({"sessions": [summary], "nextCursor": None})

    async def status(request: Request) -> JSONResponse:
        tree = {"sessionId": SESSION, "agentType": "a", "status": "running", "children": []}
        return JSONResponse({"sessionId": SESSION, "status": "running", "tree": tree})

    async def body() -> AsyncIterator[bytes]:
        yield b"retry: 1000\r\n\r\n"
        started = time.perf_counter()
        done = 0
        while done < len(messages):
            await asyncio.sleep(TICK)
            due = min(len(messages), int((time.perf_counter() - started) * rate))
            if due > done:
                yield b"".join(messages[done:due])
                done = due
        sent["seconds"] = time.perf_counter() - started
        yield b'event: end\r\ndata: {"status": "completed"}\r\n\r\n'

    async def stream(request: Request) -> StreamingResponse:
        return StreamingResponse(body(), media_type="text/event-stream")

    return Starlette(
        routes=[
            Route("/console", page),
            Mount("/console", StaticFiles(directory=CONSOLE)),
            Route("/agents", agents),
            Route("/sessions", sessions),
            Route(f"/status/{SESSION}", status),
            Route(f"/stream/{SESSION}", stream),
        ]
    )


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    if not ordered:
        return {}

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)

    return {
        "p50": round(statistics.median(ordered), 2),
        "p95": at(0.95),
        "p99": at(0.99),
        "max": round(ordered[-1], 2),
    }


async def run(options: argparse.Namespace) -> dict[str, object]:
    messages = chunks(int(options.rate * options.seconds), options.agents)
    total = len(messages)
    sent: dict[str, float] = {}
    app = stand_in(messages, options.rate, sent)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    task = asyncio.get_running_loop().create_task(server.serve())
    while not server.started:
        assert not task.done(), "the stand-in server did not start"
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        process = await asyncio.create_subprocess_exec(
            "node",
            str(JS / "console_frames.mjs"),
            f"http://127.0.0.1:{port}/console#session={SESSION}",
            str(options.seconds * 10 + 30),
            cwd=JS,
            stdout=asyncio.subprocess.PIPE,
        )
        out, _ = await process.communicate()
    finally:
        server.should_exit = True
        await task
    page = json.loads(out)
    return {
        "rate": options.rate,
        "chunks_sent": total,
        "sent_per_s": round(total / sent["seconds"]) if sent.get("seconds") else None,
        "chunks_applied": page["chunks"],
        "agents": page["agents"],
        "frames_with_work": page["frames"],
        "frames": len(page["intervals"]) + 1,
        "frame_interval_ms": percentiles(page["intervals"]),
        "frame_work_ms": percentiles(page["work"]),
        "frames_over_50ms": sum(1 for v in page["intervals"] if v > 50),
        "errors": page["errors"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=20_000)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--agents", type=int, default=8)
    print(json.dumps(asyncio.run(run(parser.parse_args()))))


if __name__ == "__main__":
    main()
