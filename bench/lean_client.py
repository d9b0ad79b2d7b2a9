"""A lean HTTP/1.1 client for the benchmarks: one keep-alive connection, JSON POSTs, SSE reads.

The benchmarks run the client on the server's machine, two cores shared with the server and
PostgreSQL. httpx with httpx-sse cost the 100-tree HTTP benchmark as much CPU as the server
itself (anyio, httpcore's pool and h11 for every chunk), so the measured ratio said more about
the client than the server. This client reads the response head, a `Content-Length` or chunked
body, and splits SSE events on their blank line; it does not follow redirects, decompress, or
handle a response it was not written for (it raises `ProtocolError`). The benchmarks keep httpx
for everything they check before timing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import urlsplit

_LIMIT = 1 << 20
"""Longest line or event the reader accepts (bytes)."""


class ProtocolError(Exception):
    """The server answered something this client does not read."""


@dataclass(frozen=True)
class Event:
    """One SSE event: its `event:` name ("message" when absent), `id:` and joined `data:`."""

    event: str
    id: str
    data: str


class LeanClient:
    """One connection to `url`'s host; requests go one after another over it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str):
        self._reader = reader
        self._writer = writer
        self._host = host

    @classmethod
    async def connect(cls, url: str) -> LeanClient:
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.hostname is None:
            raise ValueError(f"LeanClient speaks plain http, not {url!r}")
        port = parts.port or 80
        reader, writer = await asyncio.open_connection(parts.hostname, port, limit=_LIMIT)
        return cls(reader, writer, f"{parts.hostname}:{port}")

    async def aclose(self) -> None:
        self._writer.close()
        await self._writer.wait_closed()

    async def __aenter__(self) -> LeanClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()

    async def post_json(self, path: str, body: bytes) -> tuple[int, bytes]:
        """POST `body` (JSON) to `path`: the status and the whole response body."""
        self._send(
            f"POST {path} HTTP/1.1\r\nHost: {self._host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        status, headers = await self._head()
        if headers.get("transfer-encoding") == "chunked":
            return status, b"".join([piece async for piece in self._chunks()])
        length = headers.get("content-length")
        if length is None:
            raise ProtocolError("a response with neither a length nor chunks")
        return status, await self._reader.readexactly(int(length))

    async def events(self, path: str) -> AsyncIterator[Event]:
        """GET `path` as an event stream: its events, until the server ends the response."""
        accept = "Accept: text/event-stream"
        self._send(f"GET {path} HTTP/1.1\r\nHost: {self._host}\r\n{accept}\r\n\r\n".encode())
        status, headers = await self._head()
        if status != 200 or headers.get("transfer-encoding") != "chunked":
            raise ProtocolError(f"not an event stream: {status} {headers}")
        pending = b""
        async for piece in self._chunks():
            pending += piece.replace(b"\r\n", b"\n")
            *complete, pending = pending.split(b"\n\n")
            for block in complete:
                event = _event(block.decode())
                if event is not None:
                    yield event

    def _send(self, data: bytes) -> None:
        self._writer.write(data)

    async def _head(self) -> tuple[int, dict[str, str]]:
        head = await self._reader.readuntil(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        version, _, rest = status_line.partition(" ")
        if not version.startswith("HTTP/1."):
            raise ProtocolError(f"not an HTTP/1 response: {status_line!r}")
        headers: dict[str, str] = {}
        for line in lines:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip().lower()
        return int(rest.split(" ", 1)[0]), headers

    async def _chunks(self) -> AsyncIterator[bytes]:
        """A chunked body's chunks, up to the last (empty) one and its trailer."""
        while True:
            size = int((await self._reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
            if size == 0:
                await self._reader.readuntil(b"\r\n")
                return
            piece = await self._reader.readexactly(size + 2)
            yield piece[:-2]


def _event(block: str) -> Event | None:
    """The event in one blank-line-delimited block; None for comments and `retry:` only."""
    name, ident, data = "message", "", []
    for line in block.split("\n"):
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            data.append(value)
        elif field == "event":
            name = value
        elif field == "id":
            ident = value
    return Event(name, ident, "\n".join(data)) if data else None
