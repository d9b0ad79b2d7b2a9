"""The web console in headless Chromium, driven by playwright-core (tests/js/console.mjs):
served from another origin than the API, behind an API key, it starts a tree run, shows it live,
interrupts and resumes it, and answers a client tool and an approval from its form."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.responses import FileResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from app import AgentRegistry
from app.api.routes.console import CONSOLE
from app.settings import Settings
from tests.api.conftest import serve
from tests.api.test_ui_protocols import EXPECTED_TEXT, retrier, run_node, tree
from tests.e2e.test_browser import chromium_or_skip
from tests.runtime.agents import Calls
from tests.runtime.test_client_tools import client_agent

pytestmark = pytest.mark.slow

KEY = "console-key"
SCREENSHOT_ENV = "CONSOLE_SCREENSHOT"
"""Where to save a screenshot of the console (docs/console.png is taken this way)."""


DOCS = Path(__file__).resolve().parents[2] / "docs"


@contextlib.asynccontextmanager
async def static_origin() -> AsyncIterator[str]:
    """The console's files (and docs/) on a loopback port of their own: another origin than
    the API's."""

    async def page(request: object) -> FileResponse:
        return FileResponse(CONSOLE / "index.html")

    app = Starlette(
        routes=[
            Route("/console", page),
            Mount("/console", StaticFiles(directory=CONSOLE)),
            Mount("/docs", StaticFiles(directory=DOCS)),
        ]
    )
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    task = asyncio.get_running_loop().create_task(server.serve())
    while not server.started:
        assert not task.done(), "the static server did not start"
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


async def test_the_console_runs_watches_interrupts_resumes_and_answers(tmp_path: Path) -> None:
    chromium_or_skip()
    calls = Calls()
    # Slow enough that the interrupt lands while the tree runs, even on a busy machine.
    registry = AgentRegistry([tree(latency=0.8), client_agent(Counter()), retrier()])
    async with static_origin() as origin:
        settings = Settings(
            database_url=f"sqlite+aiosqlite:///{tmp_path / 'console.db'}",
            api_key=KEY,
            cors_origins=origin,
            stream_heartbeat=0.5,
            stream_poll=0.2,
        )
        async with serve(registry, calls, settings) as server:
            url = f"{origin}/console?server={server.url}"
            args = [url, KEY]
            if os.environ.get(SCREENSHOT_ENV):
                args.append(os.environ[SCREENSHOT_ENV])
            result = await run_node("console.mjs", *args, timeout=120)
            async with httpx.AsyncClient(
                base_url=server.url, headers={"Authorization": f"Bearer {KEY}"}
            ) as client:
                listed = (await client.get("/sessions")).json()["sessions"]

    assert result["errors"] == [], result
    steps = {step["name"]: step for step in result["steps"]}
    live = steps["live"]
    assert live["status"] == "running"
    assert live["agents"] >= 2
    root = live["id"]
    assert steps["interrupted"]["rootBadge"] in ("interrupted", "running")
    done = steps["completed"]
    assert done["rootText"] == EXPECTED_TEXT
    badges = dict(done["badges"])
    assert set(badges) == {
        root,
        f"{root}-sub-m1",
        f"{root}-sub-m2",
        f"{root}-sub-m1-sub-l",
        f"{root}-sub-m2-sub-l",
    }
    assert set(badges.values()) == {"completed"}
    assert root in done["sessions"]
    assert steps["pending"]["calls"] == ["q", "p"]
    assert steps["answered"]["text"] == "city=Oslo pay=paid 5"
    assert steps["answered"]["pendingHidden"] is True
    assert steps["redone"]["text"] == "A first try that works."
    # (A fourth run when a screenshot was asked for.)
    assert [s["agentType"] for s in listed][-3:] == ["retrier", "shopper", "boss"]
    assert {s["status"] for s in listed} == {"completed"}


async def test_the_readme_page_follows_a_run_with_an_event_source_and_a_token(
    tmp_path: Path,
) -> None:
    chromium_or_skip()
    registry = AgentRegistry([tree(latency=0.05)])
    async with static_origin() as origin:
        settings = Settings(
            database_url=f"sqlite+aiosqlite:///{tmp_path / 'follow.db'}",
            api_key=KEY,
            cors_origins=origin,
            stream_heartbeat=0.5,
            stream_poll=0.2,
        )
        async with serve(registry, Calls(), settings) as server:
            query = f"server={server.url}&key={KEY}&agent=boss&message=hi"
            result = await run_node("follow_page.mjs", f"{origin}/docs/follow.html?{query}")
    assert result["errors"] == []
    assert result["ended"] == {"status": "completed"}
    text = result["text"]
    assert text.startswith("Let me ask two helpers about it.")
    assert "[boss] subagent__mid" in text
    assert "[mid] subagent__leaf" in text
    assert text.endswith("Both helpers are done: all is well.\n(completed)")
