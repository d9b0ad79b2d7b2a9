"""A local OpenAI-compatible chat-completions server, so the adapter is tested over real HTTP.

`FakeOpenAI` is a small FastAPI app served by a real uvicorn server on a free loopback port. Each
`POST /v1/chat/completions` records its request and plays the next scripted reply: an SSE stream
of `chat.completion.chunk`s shaped like OpenAI's (optionally slow, or cut off mid-body) or an
error status with OpenAI's error body. It notices when a client hangs up mid-stream.

Run it as a module (`python -m tests.models.fake_openai`) to serve one fixed reply forever in a
process of its own: the bench measures the client's CPU without the server's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import re
import socket
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

MODEL = "gpt-fake-1"


@dataclass(frozen=True)
class StreamReply:
    """A 200 SSE stream of chunks, ended by `data: [DONE]`."""

    chunks: Sequence[dict[str, Any] | bytes]
    """Chunk JSONs, each sent as one `data:` event, or raw bytes sent as they are."""
    delay: float = 0.0
    """Seconds before each chunk."""
    drop_after: int | None = None
    """Cut the connection off after this many chunks (no `[DONE]`, no end of body)."""
    done: bool = True
    """Send `data: [DONE]` after the chunks."""


@dataclass(frozen=True)
class ErrorReply:
    """An error status with OpenAI's error body."""

    status: int
    message: str
    code: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    plain: bool = False
    """Send `message` as a text/plain body, as a proxy in front of the provider would."""


Reply = StreamReply | ErrorReply


@dataclass(frozen=True)
class FakeToolCall:
    """A tool call a scripted response streams: its id, name and raw JSON arguments."""

    id: str
    name: str
    arguments: str


_WORDS = re.compile(r"\S+\s*|\s+")


def completion_chunks(
    text: str = "",
    tool_calls: Sequence[FakeToolCall] = (),
    *,
    usage: tuple[int, int] | None = (21, 9),
    argument_piece: int = 4,
    interleave: bool = False,
    finish_reason: str | None = None,
) -> list[dict[str, Any]]:
    """The chunks OpenAI streams for one response: role, text word by word, tool-call deltas
    (arguments in `argument_piece`-character pieces; calls one after another, or `interleave`d),
    the finish chunk, and the usage chunk (`choices: []`) when `usage` is given."""
    deltas: list[dict[str, Any]] = [
        {"role": "assistant", "content": "" if not tool_calls else None, "refusal": None}
    ]
    deltas += [{"content": word} for word in _WORDS.findall(text)]
    per_call: list[list[dict[str, Any]]] = []
    for index, call in enumerate(tool_calls):
        pieces = [
            call.arguments[start : start + argument_piece]
            for start in range(0, len(call.arguments), argument_piece)
        ]
        first = {
            "index": index,
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        rest = [{"index": index, "function": {"arguments": piece}} for piece in pieces]
        per_call.append([first, *rest])
    if interleave:
        longest = max((len(parts) for parts in per_call), default=0)
        ordered = [parts[i] for i in range(longest) for parts in per_call if i < len(parts)]
    else:
        ordered = [part for parts in per_call for part in parts]
    deltas += [{"tool_calls": [part]} for part in ordered]
    finish = finish_reason or ("tool_calls" if tool_calls else "stop")
    chunks = [_chunk([_choice(delta)]) for delta in deltas]
    chunks.append(_chunk([_choice({}, finish)]))
    if usage is not None:
        prompt, completion = usage
        chunks.append(
            _chunk(
                [],
                usage={
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                    "completion_tokens_details": {
                        "reasoning_tokens": 0,
                        "audio_tokens": 0,
                        "accepted_prediction_tokens": 0,
                        "rejected_prediction_tokens": 0,
                    },
                },
            )
        )
    return chunks


def _choice(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}


def _chunk(choices: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake0001",
        "object": "chat.completion.chunk",
        "created": 1_720_000_000,
        "model": MODEL,
        "service_tier": "default",
        "system_fingerprint": "fp_fake",
        "choices": choices,
        "usage": usage,
    }


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received."""

    body: dict[str, Any]
    headers: Mapping[str, str]
    at: float
    """When it arrived, on the event loop's clock."""


class _DroppedConnection(Exception):
    """Raised mid-body on purpose: uvicorn then closes the connection without ending the body."""


class _QuietDrops(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], _DroppedConnection))


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # The test runner owns the signal handlers.
        yield


class FakeOpenAI:
    """The fake provider: script replies, serve, then inspect what clients sent.

    Use as an async context manager; `base_url` is valid inside it. Requests beyond the script
    are answered by `respond(body)` when given (replies that depend on the conversation, for
    agents whose calls interleave), else with `default` (the bench's endless server).
    """

    def __init__(
        self,
        *,
        respond: Callable[[dict[str, Any]], Reply] | None = None,
        default: Reply | None = None,
    ) -> None:
        self.respond = respond
        self.default = default
        self.replies: deque[Reply] = deque()
        self.requests: list[RecordedRequest] = []
        self.disconnects = 0
        """Streams the client hung up on before their end."""
        self.disconnected = asyncio.Event()
        self.disconnected_at: float | None = None
        self.port = 0
        self.app = self._build_app()
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def base_url(self) -> str:
        """The API root to give the SDK."""
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *replies: Reply) -> None:
        """Queue replies, played one per request in order."""
        self.replies.extend(replies)

    def _build_app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def chat_completions(request: Request) -> Response:
            body = await request.json()
            arrived = asyncio.get_running_loop().time()
            self.requests.append(RecordedRequest(body, dict(request.headers), arrived))
            if body.get("stream") is not True:
                return _error(ErrorReply(400, "fake server: only stream=true is scripted"))
            if self.replies:
                reply: Reply | None = self.replies.popleft()
            elif self.respond is not None:
                reply = self.respond(body)
            else:
                reply = self.default
            if reply is None:
                return _error(ErrorReply(500, "fake server: no reply scripted"))
            if isinstance(reply, ErrorReply):
                return _error(reply)
            return StreamingResponse(self._events(reply), media_type="text/event-stream")

        return app

    async def _events(self, reply: StreamReply) -> AsyncIterator[bytes]:
        ended = False
        try:
            for sent, chunk in enumerate(reply.chunks):
                if sent == reply.drop_after:
                    ended = True
                    raise _DroppedConnection
                if reply.delay:
                    await asyncio.sleep(reply.delay)
                if isinstance(chunk, bytes):
                    yield chunk
                else:
                    yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
            if reply.done:
                yield b"data: [DONE]\n\n"
            ended = True
        finally:
            if not ended:
                self.disconnects += 1
                self.disconnected_at = asyncio.get_running_loop().time()
                self.disconnected.set()

    async def __aenter__(self) -> FakeOpenAI:
        # IPPROTO_TCP explicitly: asyncio only sets TCP_NODELAY on such sockets, and without it
        # Nagle's algorithm and delayed ACKs add ~40 ms to every request on a reused connection.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            lifespan="off",
            access_log=False,
            timeout_graceful_shutdown=1,
        )
        self._server = _Server(config)
        self._quiet = _QuietDrops()
        logging.getLogger("uvicorn.error").addFilter(self._quiet)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        async with asyncio.timeout(5):
            while not self._server.started:
                if self._task.done():
                    await self._task
                    raise RuntimeError("the fake OpenAI server stopped while starting")
                await asyncio.sleep(0.005)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        assert self._task is not None
        self._server.should_exit = True
        try:
            async with asyncio.timeout(5):
                await self._task
        finally:
            logging.getLogger("uvicorn.error").removeFilter(self._quiet)


def _error(reply: ErrorReply) -> Response:
    if reply.plain:
        return PlainTextResponse(reply.message, reply.status, dict(reply.headers))
    return JSONResponse(
        {
            "error": {
                "message": reply.message,
                "type": "invalid_request_error" if reply.status < 500 else "server_error",
                "param": None,
                "code": reply.code,
            }
        },
        status_code=reply.status,
        headers=dict(reply.headers),
    )


BENCH_TEXT = "The sum of two and three is five, let me check it with the tool."
BENCH_CALL = FakeToolCall("call_bench_1", "add", '{"a": 2, "b": 3}')


def bench_text(words: int) -> str:
    """The bench's reply text: the short default, or `words` words."""
    return BENCH_TEXT if words <= 0 else "word " * words


async def _serve_forever(port: int, words: int) -> None:
    reply = StreamReply(completion_chunks(bench_text(words), [BENCH_CALL]))
    server = FakeOpenAI(default=reply)
    server.port = port
    async with server:
        print(f"listening {server.base_url}", flush=True)
        await asyncio.Event().wait()


def main() -> None:
    """Serve the bench's reply (a short text and one tool call) until terminated."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--words", type=int, default=0, help="a longer reply text, in words")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve_forever(args.port, args.words))


if __name__ == "__main__":
    main()
