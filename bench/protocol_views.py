"""The cost per chunk of each UI protocol view against the native stream, in this process.

A real tree run's stream (the demo's `text-analyst`, deterministic model, in-memory store) is
recorded once, then repeated (renumbered) to `--chunks` stored chunks. Each way of serving it
turns those stored chunks, a page of `--page` at a time as the SSE route gets them, into the
bytes one SSE write sends:

- `native`: `GET /stream/{id}` (the stored JSON goes out as it is);
- `named`: the same with `event:` lines (`?events=named`);
- `ai-sdk`: the AI SDK UI message stream view (`/stream/{id}/ai-sdk`);
- `ag-ui`: the AG-UI view (`/stream/{id}/ag-ui`).

It prints one JSON line per way: `us_per_chunk` (best of `--rounds`, CPU of one core),
`bytes_per_chunk`, and `x_native` (its cost over the native one).

    .venv/bin/python bench/protocol_views.py
    .venv/bin/python bench/protocol_views.py --chunks 200000 --page 50
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Callable

import orjson

from app import AgentRuntime
from app.api.routes.protocols import encode
from app.api.routes.stream import _named_page, _page
from app.demo.agents import build_registry
from app.protocol import chunk_to_json
from app.protocol.ag_ui import AgUiView
from app.protocol.ai_sdk import UIMessageView
from app.runtime import StreamFollower
from app.store import MemoryStore
from app.store.records import StoredChunk

TEXT = "The garden is beautiful in spring. The old fence is broken, sadly, but the roses bloom."


async def record() -> tuple[str, str, list[dict[str, object]]]:
    """One demo tree run's chunks, as stored JSON objects."""
    registry = build_registry(latency=0.0)
    async with (
        MemoryStore() as store,
        AgentRuntime(registry, store=store, takeover_interval=None) as runtime,
    ):
        handle = await runtime.execute("text-analyst", f"Analyse: {TEXT}", session_id="bench")
        await handle.result()
        chunks = await runtime.store.read_chunks("bench", limit=100_000)
    return "bench", "text-analyst", [orjson.loads(chunk_to_json(c)) for c in chunks]


def stored_pages(run: list[dict[str, object]], total: int, page: int) -> list[list[StoredChunk]]:
    """`total` chunks repeating the run (renumbered, each repetition's sub-agents with ids of
    their own), as the store hands them: pages of `(sequence, wire JSON)`."""
    stored: list[StoredChunk] = []
    root = run[0]["agentId"]
    repetition = 0
    while len(stored) < total:
        for chunk in run:
            sequence = len(stored) + 1
            renamed = {**chunk, "sequence": sequence}
            for key in ("agentId", "subSessionId"):
                if key in renamed and renamed[key] != root:
                    renamed[key] = f"{renamed[key]}-r{repetition}"
            stored.append((sequence, orjson.dumps(renamed).decode()))
            if len(stored) == total:
                break
        repetition += 1
    return [stored[i : i + page] for i in range(0, total, page)]


class _Follower:
    status = None


def native(pages: list[list[StoredChunk]], named: bool) -> int:
    follower: StreamFollower = _Follower()  # type: ignore[assignment]
    page_of = _named_page if named else _page
    return sum(len(page_of(page, follower)) for page in pages)


def view(pages: list[list[StoredChunk]], make: Callable[[], UIMessageView | AgUiView]) -> int:
    translator = make()
    size = len(encode(translator.opening()))
    for page in pages:
        size += len(encode(translator.page([orjson.loads(body) for _, body in page])))
    return size + len(encode(translator.closing("completed")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--page", type=int, default=100, help="chunks per SSE write")
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    root, root_type, run = asyncio.run(record())
    pages = stored_pages(run, options.chunks, options.page)
    kinds = {
        "run": sorted({str(c["type"]) for c in run}),
        "agents": len({c["agentId"] for c in run}),
        "chunks_per_run": len(run),
    }
    print(json.dumps({"recorded": kinds}))
    ways: dict[str, Callable[[], int]] = {
        "native": lambda: native(pages, False),
        "named": lambda: native(pages, True),
        "ai-sdk": lambda: view(pages, lambda: UIMessageView(root, message_id="m")),
        "ag-ui": lambda: view(pages, lambda: AgUiView(root, root_type, thread_id=root, run_id="r")),
    }
    base = None
    for name, way in ways.items():
        best = float("inf")
        size = 0
        for _ in range(options.rounds):
            started = time.process_time()
            size = way()
            best = min(best, time.process_time() - started)
        per_chunk = best / options.chunks * 1e6
        base = base or per_chunk
        print(
            json.dumps(
                {
                    "way": name,
                    "chunks": options.chunks,
                    "page": options.page,
                    "us_per_chunk": round(per_chunk, 3),
                    "bytes_per_chunk": round(size / options.chunks, 1),
                    "x_native": round(per_chunk / base, 1),
                }
            )
        )


if __name__ == "__main__":
    main()
