"""A real browser: headless Chromium's `EventSource`, cut off mid-run, reconnects by itself with
`Last-Event-ID` and ends up with every chunk exactly once.

The test serves the page itself, on a loopback port of its own that also proxies `/stream/...` to
the server (so the page and its stream share an origin) and cuts the browser's first stream
connection after `CUT_AFTER` chunks. The run starts when the page says it is ready (a browser
takes seconds to start); the page follows it, closes its EventSource on the `end` event and
posts what it received to the test's `/collect`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from app.protocol import chunk_from_json
from tests.e2e.agents import EXPECTED_OUTPUT
from tests.e2e.conftest import loopback_client, open_cluster, read_stream, wait_status
from tests.e2e.streams import check_frames, check_sequences, expected_stories, stories
from tests.support import check_invariants

pytestmark = pytest.mark.slow

CUT_AFTER = 3
SESSION = "b1"
PAGE = """<!doctype html>
<meta charset="utf-8">
<title>stream</title>
<script>
const received = [];
let opens = 0;
let errors = 0;
fetch("/ready", {method: "POST"}).then(() => {
  const source = new EventSource("/stream/SESSION");
  source.onopen = () => { opens += 1; };
  source.onerror = () => { errors += 1; };
  source.onmessage = (event) => { received.push({id: event.lastEventId, data: event.data}); };
  source.addEventListener("end", (event) => {
    source.close();
    fetch("/collect", {
      method: "POST",
      headers: {"Content-Type": "application/json"},
      body: JSON.stringify({received, end: JSON.parse(event.data), opens, errors}),
    });
  });
});
</script>
""".replace("SESSION", SESSION)


def chromium_or_skip() -> str:
    """The Chromium binary; skip (or fail under CI) when it is missing."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        reason = (
            "Chromium is not installed (`make test` installs Debian's chromium when apt-get "
            "is usable)"
        )
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI requires the browser test")
        pytest.skip(reason)
    return found


@dataclass
class Front:
    """The page, the collector and the cutting proxy, on one loopback port."""

    upstream_port: int
    start_run: Callable[[], Awaitable[None]]
    port: int = 0
    stream_requests: list[dict[str, str]] = field(default_factory=list)
    cut: asyncio.Event = field(default_factory=asyncio.Event)
    collected: asyncio.Future[dict[str, Any]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            method, path, _ = head.split(b"\r\n", 1)[0].decode().split(" ", 2)
            headers = _headers(head)
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            if method == "GET" and path == "/":
                await _answer(writer, 200, "text/html; charset=utf-8", PAGE.encode())
            elif method == "POST" and path == "/ready":
                await self.start_run()
                await _answer(writer, 204, "text/plain", b"")
            elif method == "POST" and path == "/collect":
                if not self.collected.done():
                    self.collected.set_result(json.loads(body))
                await _answer(writer, 204, "text/plain", b"")
            elif method == "GET" and path.startswith("/stream/"):
                self.stream_requests.append(headers)
                cut = len(self.stream_requests) == 1
                await self.proxy(head, writer, cut_after=CUT_AFTER if cut else None)
            else:
                await _answer(writer, 404, "text/plain", b"not here")
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def proxy(
        self, head: bytes, writer: asyncio.StreamWriter, *, cut_after: int | None
    ) -> None:
        """Relay the stream; with `cut_after`, drop the connection after that many chunks."""
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        # One response per connection, so the browser never sends its next request down it.
        lines = head.split(b"\r\n")
        kept = [line for line in lines[1:] if not line.lower().startswith(b"connection:")]
        head = b"\r\n".join([lines[0], b"Connection: close", *kept])
        try:
            up_writer.write(head)
            await up_writer.drain()
            response_head = await up_reader.readuntil(b"\r\n\r\n")
            writer.write(response_head)
            if cut_after is None:
                while data := await up_reader.read(65536):
                    writer.write(data)
                    await writer.drain()
                return
            assert b"transfer-encoding: chunked" in response_head.lower()
            sent = 0
            text = ""
            while True:
                size = int((await up_reader.readuntil(b"\r\n")).strip(), 16)
                if size == 0:
                    return
                text += (await up_reader.readexactly(size + 2))[:-2].decode()
                # Pass on whole SSE events, each as one HTTP chunk, until the cut.
                while "\r\n\r\n" in text:
                    event, text = text.split("\r\n\r\n", 1)
                    data = (event + "\r\n\r\n").encode()
                    writer.write(b"%x\r\n%s\r\n" % (len(data), data))
                    await writer.drain()
                    if any(line.startswith("id:") for line in event.split("\r\n")):
                        sent += 1
                    if sent == cut_after:
                        self.cut.set()
                        return
        finally:
            up_writer.close()
            with contextlib.suppress(ConnectionError):
                await up_writer.wait_closed()


def _headers(head: bytes) -> dict[str, str]:
    lines = head.decode("latin-1").split("\r\n")[1:]
    pairs = [line.split(":", 1) for line in lines if ":" in line]
    return {name.strip().lower(): value.strip() for name, value in pairs}


async def _answer(writer: asyncio.StreamWriter, status: int, kind: str, body: bytes) -> None:
    writer.write(
        f"HTTP/1.1 {status} X\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
        "Cache-Control: no-store\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    await writer.drain()


@contextlib.asynccontextmanager
async def serve_front(
    upstream_port: int, start_run: Callable[[], Awaitable[None]]
) -> AsyncIterator[Front]:
    front = Front(upstream_port, start_run)
    server = await asyncio.start_server(front.handle, "127.0.0.1", 0)
    front.port = server.sockets[0].getsockname()[1]
    try:
        yield front
    finally:
        server.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(server.wait_closed(), 5)


@contextlib.asynccontextmanager
async def chromium(binary: str, url: str, folder: Path) -> AsyncIterator[None]:
    """Headless Chromium on `url`, in a process group of its own, ended when the block ends."""
    profile = folder / "chromium-profile"
    profile.mkdir()
    with (folder / "chromium.log").open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            binary,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
            f"--user-data-dir={profile}",
            url,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, sig)
            try:
                await asyncio.wait_for(process.wait(), 5)
                break
            except TimeoutError:
                continue


async def test_a_browser_event_source_reconnects_and_gets_every_chunk_once(
    tmp_path: Path,
) -> None:
    binary = chromium_or_skip()
    async with open_cluster("sqlite", tmp_path) as cluster:
        server = await cluster.start("a")
        upstream_port = int(server.url.rsplit(":", 1)[1])
        async with loopback_client(server.url) as client:

            async def start_run() -> None:
                started = await client.post(
                    "/start", json={"agentType": "lead", "message": "go", "sessionId": SESSION}
                )
                assert started.status_code == 201, started.text

            async with (
                serve_front(upstream_port, start_run) as front,
                chromium(binary, f"http://127.0.0.1:{front.port}/", tmp_path),
            ):
                await asyncio.wait_for(front.cut.wait(), 20)
                at_cut = (await client.get(f"/status/{SESSION}")).json()
                try:
                    collected = await asyncio.wait_for(front.collected, 30)
                except TimeoutError:
                    log = (tmp_path / "chromium.log").read_text(errors="replace")[-3000:]
                    raise AssertionError(f"the page never reported\n{log}") from None
            done = await wait_status(server.url, SESSION, "completed")
            whole = await read_stream(server.url, SESSION)

    assert at_cut["status"] == "running", "the run ended before the connection was cut"
    assert at_cut["lastSequence"] < done["lastSequence"]
    # The browser opened the stream twice: once from the start, once after the cut, by itself,
    # telling the server the last chunk it had.
    assert [request.get("last-event-id") for request in front.stream_requests] == [
        None,
        str(CUT_AFTER),
    ]
    assert (collected["opens"], collected["errors"]) == (2, 1)
    assert collected["end"] == {"status": "completed"}
    # Every chunk exactly once, in order, as the server has them.
    received = [chunk_from_json(item["data"]) for item in collected["received"]]
    assert received == whole.chunks
    check_sequences(received, [item["id"] for item in collected["received"]])
    check_invariants(received)
    check_frames(received, complete=True)
    assert stories(received, SESSION) == expected_stories(SESSION)
    assert done["output"] == EXPECTED_OUTPUT
