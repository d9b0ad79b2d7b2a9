"""The agents the benchmark servers run: `AGENT_MODULE=bench.agents:registry`.

Every model is fake (no network) and deterministic:

- `parent` / `child`: the peer-bench tree, built by `bench.peer_tree.build_registry` so its shape
  is the same as in-process (8 model calls, 3 parallel delegations, 3 `add` calls), with model
  latency `BENCH_LATENCY_MS` (default 50).
- `counters`: answers with the JSON of this process's call counters (`peer_tree.COUNTS` plus the
  ones below), so a benchmark can check what a server really ran.
- `fanout`: streams many chunks fast. Its first model call (after `delay` seconds, so clients can
  connect first) delegates to `agents` local `emitter` children at once; the emitters stream
  `chunks` text deltas each, strictly taking turns so that no two adjacent deltas come from the
  same agent (the stream writer joins adjacent deltas of one agent into one chunk). `rate` paces
  the whole tree's emission (deltas per second, 0 = as fast as it goes). Each delta is
  `"<n>@<emit time, us since epoch> "`, so latency can be measured even after a remote hop has
  re-stamped the chunk. Input (the first message, JSON): `{"chunks", "agents", "rate", "delay"}`.
- `iroot` -> 2 `iproc` -> 2 `ileaf` each (7 sessions): the tree of
  tests/runtime/test_interrupt.py; the leaves stream `BENCH_LEAF_WORDS` words (default 40), one
  per `BENCH_LEAF_DELAY` seconds (default 0.1), so an interrupt finds them mid-stream.
- `hop_child`: 2 quick model steps (asks for `add`, then finishes with the sum);
  `hop_local` delegates one `hop_child` in this process; `hop_remote` delegates it to the server
  at `BENCH_REMOTE_URL` through `HttpRemoteAgentTransport`; `proxy` runs the remote server's
  `fanout` as a remote sub-agent, so its chunks are copied into this server's stream.
  (`hop_remote` and `proxy` exist only when `BENCH_REMOTE_URL` is set.)
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

from pydantic import BaseModel

from app import (
    AgentRegistry,
    HttpRemoteAgentTransport,
    create_remote_sub_agent_tool,
    create_sub_agent_tool,
    define_agent,
    define_tool,
)
from app.agents import AgentConfig, ToolContext
from app.models import (
    FunctionModel,
    Model,
    ModelEvent,
    ModelRequest,
    ModelResponse,
    TextDelta,
    ToolCall,
    ToolCallReady,
)
from app.protocol import ToolMessage
from bench.peer_tree import COUNTS, build_registry

LATENCY = float(os.environ.get("BENCH_LATENCY_MS", "50")) / 1000
LEAF_DELAY = float(os.environ.get("BENCH_LEAF_DELAY", "0.1"))
LEAF_WORDS = int(os.environ.get("BENCH_LEAF_WORDS", "40"))
REMOTE_URL = os.environ.get("BENCH_REMOTE_URL")

CALLS: Counter[str] = Counter()
"""Model and tool calls of the agents below, by name."""


def _results(request: ModelRequest) -> list[ToolMessage]:
    return [m for m in request.messages if isinstance(m, ToolMessage)]


def _first_json(request: ModelRequest) -> dict[str, Any]:
    first = request.messages[0]
    content = getattr(first, "content", "")
    data = json.loads(content)
    assert isinstance(data, dict)
    return data


# -- counters ------------------------------------------------------------------------------------


def counters_agent() -> AgentConfig:
    def model(request: ModelRequest) -> ModelResponse:
        return ModelResponse(text=json.dumps({**COUNTS, **CALLS}))

    return define_agent("counters", model=FunctionModel(model))


# -- fanout: many chunks fast --------------------------------------------------------------------


class Fan(BaseModel):
    chunks: int
    agents: int
    rate: float
    index: int
    key: str


class Emitted(BaseModel):
    count: int


class FanoutInput(BaseModel):
    chunks: int
    agents: int = 2
    rate: float = 0.0
    delay: float = 0.0


class FanoutOutput(BaseModel):
    emitted: int


class _Baton:
    """Turn-taking among one tree's emitters: emitter i streams delta n only when n % agents ==
    i, so adjacent deltas always come from different agents."""

    def __init__(self, agents: int, rate: float) -> None:
        self.agents = agents
        self.rate = rate
        self.turns = [asyncio.Event() for _ in range(agents)]
        self.turns[0].set()
        self.count = 0
        self.started = 0.0
        self.finished = 0

    async def take(self, index: int) -> None:
        await self.turns[index].wait()
        self.turns[index].clear()
        if self.count == 0:
            self.started = time.perf_counter()
        elif self.rate > 0:
            ahead = self.started + self.count / self.rate - time.perf_counter()
            if ahead > 0.001:
                await asyncio.sleep(ahead)

    def pass_on(self, index: int) -> None:
        self.count += 1
        self.turns[(index + 1) % self.agents].set()


_BATONS: dict[str, _Baton] = {}


class Emitter(Model):
    """Streams `chunks` deltas, taking turns with its siblings, then finishes."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        CALLS["model_emitter"] += 1
        fan = Fan.model_validate(_first_json(request))
        baton = _BATONS.setdefault(fan.key, _Baton(fan.agents, fan.rate))
        try:
            for _ in range(fan.chunks):
                await baton.take(fan.index)
                yield TextDelta(f"{baton.count}@{time.time_ns() // 1000} ")
                baton.pass_on(fan.index)
        finally:
            baton.finished += 1
            if baton.finished == fan.agents:
                _BATONS.pop(fan.key, None)
        yield ToolCallReady(ToolCall("__finish__", {"count": fan.chunks}))


def fanout_agent() -> AgentConfig:
    emitter = define_agent("emitter", output_schema=Emitted, model=Emitter())

    async def model(request: ModelRequest) -> ModelResponse:
        CALLS["model_fanout"] += 1
        done = _results(request)
        if done:
            total = sum(m.result["count"] for m in done if isinstance(m.result, dict))
            return ModelResponse(tool_calls=[ToolCall("__finish__", {"emitted": total})])
        spec = FanoutInput.model_validate(_first_json(request))
        if spec.delay > 0:
            await asyncio.sleep(spec.delay)
        per_agent = spec.chunks // spec.agents
        return ModelResponse(
            tool_calls=[
                ToolCall(
                    "subagent__emitter",
                    Fan(
                        chunks=per_agent,
                        agents=spec.agents,
                        rate=spec.rate,
                        index=index,
                        key=request.session_id,
                    ).model_dump(),
                )
                for index in range(spec.agents)
            ]
        )

    return define_agent(
        "fanout",
        tools=[create_sub_agent_tool(emitter, Fan, description="Stream deltas.")],
        output_schema=FanoutOutput,
        model=FunctionModel(model),
        max_steps=5,
    )


# -- the interrupt tree --------------------------------------------------------------------------


class Job(BaseModel):
    message: str


class Report(BaseModel):
    report: str


class Streaming(Model):
    """Streams each response's text word by word, `delay()` seconds apart."""

    def __init__(
        self,
        name: str,
        delay: Callable[[], float],
        decide: Callable[[ModelRequest], ModelResponse],
    ) -> None:
        self.agent = name
        self.delay = delay
        self.decide = decide

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        CALLS[f"model_{self.agent}"] += 1
        response = self.decide(request)
        for word in response.text.split():
            await asyncio.sleep(self.delay())
            yield TextDelta(word + " ")
        for call in response.tool_calls:
            yield ToolCallReady(call)


def interrupt_tree(leaf_delay: Callable[[], float] = lambda: LEAF_DELAY) -> AgentConfig:
    """iroot -> 2 iproc in parallel -> 2 ileaf each in parallel: 7 sessions."""

    def leaf(request: ModelRequest) -> ModelResponse:
        words = " ".join(f"word{i}" for i in range(LEAF_WORDS))
        return ModelResponse(text=words, tool_calls=[ToolCall("__finish__", {"report": "ok"})])

    def processor(request: ModelRequest) -> ModelResponse:
        if _results(request):
            return ModelResponse(tool_calls=[ToolCall("__finish__", {"report": "processed"})])
        return ModelResponse(
            text="splitting",
            tool_calls=[ToolCall("subagent__ileaf", {"message": f"part {i}"}) for i in range(2)],
        )

    def root(request: ModelRequest) -> ModelResponse:
        if _results(request):
            return ModelResponse(text="all parts processed")
        return ModelResponse(
            text="delegating",
            tool_calls=[ToolCall("subagent__iproc", {"message": f"half {i}"}) for i in range(2)],
        )

    quick: Callable[[], float] = lambda: 0.001  # noqa: E731
    leaf_agent = define_agent(
        "ileaf", output_schema=Report, model=Streaming("ileaf", leaf_delay, leaf)
    )
    processor_agent = define_agent(
        "iproc",
        output_schema=Report,
        tools=[create_sub_agent_tool(leaf_agent, Job)],
        model=Streaming("iproc", quick, processor),
    )
    return define_agent(
        "iroot",
        tools=[create_sub_agent_tool(processor_agent, Job)],
        model=Streaming("iroot", quick, root),
    )


# -- remote hop ----------------------------------------------------------------------------------


class AddInput(BaseModel):
    a: int
    b: int


class HopTask(BaseModel):
    a: int
    b: int


class Sum(BaseModel):
    total: int


@define_tool("add", description="Add two integers.", input_schema=AddInput)
async def add(input: AddInput, ctx: ToolContext[Any]) -> int:
    CALLS["tool_add"] += 1
    return input.a + input.b


def hop_child() -> AgentConfig:
    """2 quick model steps: ask for `add`, then finish with its result."""

    def model(request: ModelRequest) -> ModelResponse:
        CALLS["model_hop_child"] += 1
        done = _results(request)
        if done:
            return ModelResponse(tool_calls=[ToolCall("__finish__", {"total": done[-1].result})])
        task = HopTask.model_validate(_first_json(request))
        return ModelResponse(tool_calls=[ToolCall("add", {"a": task.a, "b": task.b})])

    return define_agent("hop_child", tools=[add], output_schema=Sum, model=FunctionModel(model))


def hop_parent(name: str, tool: Any) -> AgentConfig:
    """Delegates one `hop_child` (2 + 3 = 5), then answers with its result."""

    def model(request: ModelRequest) -> ModelResponse:
        CALLS[f"model_{name}"] += 1
        done = _results(request)
        if done:
            return ModelResponse(text=f"done {done[-1].result} {done[-1].error}")
        return ModelResponse(tool_calls=[ToolCall(tool.name, {"a": 2, "b": 3})])

    return define_agent(name, tools=[tool], model=FunctionModel(model))


def proxy_agent(transport: HttpRemoteAgentTransport) -> AgentConfig:
    """Runs the remote server's `fanout` as a remote sub-agent (its input is this session's)."""
    tool = create_remote_sub_agent_tool(
        "fanout",
        description="Stream many chunks on the remote server.",
        input_schema=FanoutInput,
        output_schema=FanoutOutput,
        transport=transport,
        remote_agent_type="fanout",
    )

    def model(request: ModelRequest) -> ModelResponse:
        CALLS["model_proxy"] += 1
        done = _results(request)
        if done:
            return ModelResponse(text=f"done {done[-1].result} {done[-1].error}")
        return ModelResponse(tool_calls=[ToolCall(tool.name, _first_json(request))])

    return define_agent("proxy", tools=[tool], model=FunctionModel(model))


def build() -> AgentRegistry:
    """Every agent above (the remote ones only with `BENCH_REMOTE_URL`)."""
    agents = [*build_registry(LATENCY), counters_agent(), fanout_agent(), interrupt_tree()]
    child = hop_child()
    agents.append(hop_parent("hop_local", create_sub_agent_tool(child, HopTask)))
    if REMOTE_URL:
        transport = HttpRemoteAgentTransport(REMOTE_URL)
        remote = create_remote_sub_agent_tool(
            "hop_child",
            description="The same child on the remote server.",
            input_schema=HopTask,
            output_schema=Sum,
            transport=transport,
            remote_agent_type="hop_child",
        )
        agents += [hop_parent("hop_remote", remote), proxy_agent(transport)]
    return AgentRegistry(agents)


registry = build()
