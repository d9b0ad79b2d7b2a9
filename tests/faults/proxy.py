"""`TcpProxy`: an asyncio TCP proxy on loopback that plays a bad network in front of PostgreSQL or
a remote agent server.

On command it refuses new connections (nothing listens: `ECONNREFUSED`), resets the existing ones
(RST), black-holes traffic (connections stay open and accepted, nothing is forwarded: a half-open
connection as a partition leaves it), delays what it forwards, and heals. A connection caught by a
black hole stays dead after `heal` unless `heal(caught=True)`: after a real partition nobody tells
the two ends that their connection is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self


@dataclass(eq=False)
class _Pipe:
    """One client connection and, once made, its upstream connection."""

    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    blackholed: bool = False
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    handler: asyncio.Task[object] | None = None

    def writers(self) -> list[asyncio.StreamWriter]:
        return [w for w in (self.client, self.upstream) if w is not None]


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with an RST, not a FIN: the peer's next read or write fails at once."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class TcpProxy:
    """Forwards `127.0.0.1:<port>` to `target_host:target_port` until told otherwise.

    Use it as an async context manager. `port` is fixed once started (a given `port`, or a free
    one), and stays the same across `refuse` and `heal`.
    """

    def __init__(self, target_host: str, target_port: int, *, port: int = 0) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.port = port
        self.delay = 0.0
        """Seconds each forwarded piece of data waits."""
        self.blackhole_new = False
        """Whether new connections are accepted and then black-holed."""
        self.connections = 0
        """Connections accepted so far."""
        self._server: asyncio.Server | None = None
        self._pipes: set[_Pipe] = set()

    @property
    def url_host(self) -> str:
        """`127.0.0.1:<port>`, for building URLs."""
        return f"127.0.0.1:{self.port}"

    async def __aenter__(self) -> Self:
        await self._listen()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(
            self._accept, "127.0.0.1", self.port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        """Stop listening and reset every connection."""
        await self._stop_listening()
        self.reset()
        tasks: list[asyncio.Task[object] | asyncio.Task[None]] = [
            task for pipe in self._pipes for task in pipe.tasks
        ]
        tasks += [pipe.handler for pipe in self._pipes if pipe.handler is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._pipes.clear()

    async def _stop_listening(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    # -- commands ------------------------------------------------------------------------------

    async def refuse(self) -> None:
        """Refuse new connections (nothing listens on the port); existing ones go on."""
        await self._stop_listening()

    def reset(self) -> None:
        """Reset every existing connection (both ends get an RST)."""
        for pipe in list(self._pipes):
            for writer in pipe.writers():
                _reset(writer)

    def blackhole(self, *, existing: bool = True, new: bool = True) -> None:
        """Stop forwarding: on the existing connections, on new ones, or both. Black-holed
        connections stay open; what is sent on them is read and dropped."""
        if existing:
            for pipe in self._pipes:
                pipe.blackholed = True
        self.blackhole_new = new

    async def heal(self, *, caught: bool = False) -> None:
        """Listen and forward again, without delay. Connections caught by a black hole stay
        black-holed unless `caught`."""
        self.delay = 0.0
        self.blackhole_new = False
        if caught:
            for pipe in self._pipes:
                pipe.blackholed = False
        if self._server is None:
            await self._listen()

    # -- forwarding ----------------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        pipe = _Pipe(writer, blackholed=self.blackhole_new, handler=asyncio.current_task())
        self._pipes.add(pipe)
        try:
            if pipe.blackholed:
                await self._drain_forever(reader)
                return
            try:
                up_reader, up_writer = await asyncio.open_connection(
                    self.target_host, self.target_port
                )
            except OSError:
                _reset(writer)
                return
            pipe.upstream = up_writer
            pipe.tasks = [
                asyncio.ensure_future(self._copy(reader, up_writer, pipe)),
                asyncio.ensure_future(self._copy(up_reader, writer, pipe)),
            ]
            await asyncio.wait(pipe.tasks, return_when=asyncio.FIRST_COMPLETED)
            if not pipe.blackholed:
                for other in pipe.writers():
                    other.close()
            await asyncio.gather(*pipe.tasks, return_exceptions=True)
        finally:
            if not pipe.blackholed:
                self._pipes.discard(pipe)

    async def _drain_forever(self, reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(OSError):
            while await reader.read(65536):
                pass
        # The peer closed: a black hole never answers, so it just waits to be closed itself.
        await asyncio.Event().wait()

    async def _copy(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, pipe: _Pipe
    ) -> None:
        with contextlib.suppress(OSError):
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                if pipe.blackholed:
                    continue
                if self.delay:
                    await asyncio.sleep(self.delay)
                    if pipe.blackholed:
                        continue
                writer.write(data)
                await writer.drain()
        if pipe.blackholed:
            # Half-open: the other end learns nothing, ever (until the proxy closes).
            await asyncio.Event().wait()
