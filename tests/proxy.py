"""A TCP proxy on loopback that can break the network between a server and what it talks to.

`forward` passes bytes both ways; `refuse` closes new connections at once; `blackhole` keeps
every connection open but passes nothing more either way (a partition: the peers see half-open
connections that never answer); `drop` resets every open connection; `heal` forwards again (the
connections black-holed meanwhile stay dead, as after a real partition).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Literal

Mode = Literal["forward", "refuse", "blackhole"]


class Proxy:
    """Listens on a free loopback port and forwards to `target_host:target_port`."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.mode: Mode = "forward"
        self.port = 0
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for link in list(self._links):
            link.close(reset=True)
        if self._server is not None:
            await self._server.wait_closed()

    def refuse(self) -> None:
        """Close new connections as soon as they arrive."""
        self.mode = "refuse"

    def blackhole(self) -> None:
        """Stop passing bytes on every connection, open or new, without closing any."""
        self.mode = "blackhole"
        for link in self._links:
            link.stalled = True

    def drop(self) -> None:
        """Reset every open connection."""
        for link in list(self._links):
            link.close(reset=True)

    def heal(self) -> None:
        """Forward new connections again (stalled ones stay stalled)."""
        self.mode = "forward"

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.mode == "refuse":
            writer.close()
            return
        link = _Link(reader, writer, stalled=self.mode == "blackhole")
        self._links.add(link)
        try:
            if not link.stalled:
                await link.connect(*self.target)
            await link.run()
        finally:
            self._links.discard(link)
            link.close(reset=False)


class _Link:
    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, stalled: bool
    ) -> None:
        self.client = (reader, writer)
        self.upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self.stalled = stalled
        self._done = asyncio.Event()

    async def connect(self, host: str, port: int) -> None:
        self.upstream = await asyncio.open_connection(host, port)

    async def run(self) -> None:
        if self.upstream is None:
            await self._done.wait()  # black-holed from the start: hold it open, silently
            return
        pumps = [
            asyncio.ensure_future(self._pump(self.client[0], self.upstream[1])),
            asyncio.ensure_future(self._pump(self.upstream[0], self.client[1])),
        ]
        done_waiter = asyncio.ensure_future(self._done.wait())
        await asyncio.wait([*pumps, done_waiter], return_when=asyncio.FIRST_COMPLETED)
        for task in (*pumps, done_waiter):
            task.cancel()
        await asyncio.gather(*pumps, done_waiter, return_exceptions=True)

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        while True:
            data = await source.read(65536)
            if not data:
                return
            if self.stalled:
                await self._done.wait()
                return
            sink.write(data)
            await sink.drain()

    def close(self, *, reset: bool) -> None:
        self._done.set()
        for writer in (self.client[1], self.upstream[1] if self.upstream else None):
            if writer is None:
                continue
            transport = writer.transport
            if reset:
                with contextlib.suppress(Exception):
                    transport.abort()
            else:
                writer.close()


@contextlib.asynccontextmanager
async def proxy_to(host: str, port: int) -> AsyncIterator[Proxy]:
    """A running proxy to `host:port`, closed when the block ends."""
    proxy = Proxy(host, port)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.close()
