"""The agent tree the in-process scenarios run, and the faulty doubles that drive it.

    root   function tools, an optional client tool, parallel `mid` and `leaf` children, 1-2 rounds
    mid    function tools and parallel `leaf` children, then a typed finish
    leaf   function tools, then a typed finish

One registry serves every scenario: each agent's model (`PlannedModel`) reads the plan of the
scenario its session belongs to (the session id's first part, `s<seed>`) and answers from it,
seeded: which calls each response makes, which tool-call ids it gives them (unique, `call_0`
afresh in every response, one id twice in a response, none), and what goes wrong with it
(raise, hang, invalid JSON arguments, an unknown tool, huge text, NUL characters, lone
surrogates, NaN). The `work` tool fails the same way (raise, hang, a value that is not JSON,
NaN, huge or unholdable strings). Every model and tool call is recorded in the scenario's
ledger, with the process (`NODE`) that made it, before it does anything else.

A fault keyed as "sticky" (a value a store may not hold) comes back on every attempt of the
same call, as a model or tool given the same input would return it; the others are drawn again
on each attempt.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from pydantic import BaseModel

from app import AgentRegistry, create_sub_agent_tool, define_agent, define_tool
from app.agents import ToolContext
from app.models import Model, ModelEvent, ModelRequest, TextDelta, ToolCallReady
from app.protocol import ToolCall
from tests.faults.ledger import CallKey, Ledger

NODE: ContextVar[str] = ContextVar("fault_node", default="-")
"""The simulated process a coroutine runs in (each node's runtime runs in a context of its own)."""

IdMode = Literal["unique", "reuse", "dup", "none"]
ModelFault = Literal[
    "raise",
    "hang",
    "bad_args",
    "unknown_tool",
    "huge_text",
    "nul_text",
    "surrogate_text",
    "nan_args",
]
ToolFault = Literal["raise", "hang", "non_json", "nan", "huge", "nul", "surrogate"]
MODEL_FAULTS: tuple[ModelFault, ...] = get_args(ModelFault)
TOOL_FAULTS: tuple[ToolFault, ...] = get_args(ToolFault)
STICKY = frozenset({"nul_text", "surrogate_text", "nan_args", "nan", "nul", "surrogate"})
"""Faults that are the data itself: the same call gives them again on every attempt."""

HUGE = 256 * 1024


class Job(BaseModel):
    message: str


class Done(BaseModel):
    done: str


class Work(BaseModel):
    token: str


class Question(BaseModel):
    question: str


@dataclass(frozen=True)
class Plan:
    """What the models and tools of one scenario do, all drawn from `seed`."""

    seed: int
    id_mode: IdMode = "unique"
    model_rate: float = 0.0
    model_faults: tuple[ModelFault, ...] = MODEL_FAULTS
    tool_rate: float = 0.0
    tool_faults: tuple[ToolFault, ...] = TOOL_FAULTS
    ask: bool = False
    """Whether the root's first response also asks the client (the session pauses)."""
    latency: float = 0.01
    """Longest a model or tool call takes (each draws its own, up to this)."""

    @property
    def prefix(self) -> str:
        """The scenario's root session id, and the first part of every id in its tree."""
        return f"s{self.seed}"

    def rng(self, *parts: object) -> random.Random:
        """A generator seeded by the scenario's seed and `parts`."""
        return random.Random("|".join([str(self.seed), *map(str, parts)]))

    # -- what each session asks for ------------------------------------------------------------

    def turns(self, session_id: str, agent_type: str) -> list[list[tuple[str, dict[str, Any]]]]:
        """The calls of each of the session's responses before its final one."""
        r = self.rng("script", session_id)
        if agent_type == "root":
            first = [("subagent__mid", {"message": f"mid {i}"}) for i in range(r.randint(0, 2))]
            first += [("subagent__leaf", {"message": f"leaf {i}"}) for i in range(r.randint(0, 2))]
            first += [("work", {}) for _ in range(r.randint(0, 2))]
            if self.ask:
                first.append(("ask", {"question": "go on?"}))
            if not first:
                first.append(("work", {}))
            r.shuffle(first)
            turns = [first]
            if r.random() < 0.4:
                again = [("subagent__leaf", {"message": "again"})] * r.randint(0, 1)
                turns.append([*again, ("work", {})])
            return turns
        if agent_type == "mid":
            calls = [("subagent__leaf", {"message": f"leaf {i}"}) for i in range(r.randint(0, 2))]
            calls += [("work", {}) for _ in range(r.randint(0, 1))]
            return [calls or [("work", {})]]
        return [[("work", {}) for _ in range(r.randint(1, 2))]] if r.random() < 0.7 else []

    def call_id(self, index: int, position: int) -> str | None:
        """The id the model gives the call at `position` of its response at `index`."""
        if self.id_mode == "unique":
            return f"c{index}_{position}"
        if self.id_mode == "reuse":
            return f"call_{position}"
        if self.id_mode == "dup":
            return "call_0"
        return None

    # -- what goes wrong -----------------------------------------------------------------------

    def _fault(
        self, kind: str, key: CallKey, attempt: int, rate: float, faults: tuple[str, ...]
    ) -> str | None:
        if not faults:
            return None
        first = self.rng(kind, key, 0)
        fault = first.choice(faults) if first.random() < rate else None
        if attempt == 0 or fault in STICKY:
            return fault
        again = self.rng(kind, key, attempt)
        transient = [f for f in faults if f not in STICKY]
        return again.choice(transient) if transient and again.random() < rate else None

    def model_fault(self, key: CallKey, attempt: int) -> ModelFault | None:
        """What goes wrong with this attempt of the model call."""
        return self._fault("model", key, attempt, self.model_rate, self.model_faults)  # type: ignore[return-value]

    def tool_fault(self, key: CallKey, attempt: int) -> ToolFault | None:
        """What goes wrong with this attempt of the tool call."""
        return self._fault("tool", key, attempt, self.tool_rate, self.tool_faults)  # type: ignore[return-value]

    def pause(self, key: CallKey, attempt: int) -> float:
        """How long this attempt of the call takes."""
        return self.rng("latency", key, attempt).uniform(0, self.latency)


@dataclass
class Stage:
    """One scenario as its agents see it: its plan, ledger, and the processes' fates."""

    plan: Plan
    ledger: Ledger = field(default_factory=Ledger)
    healed: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the faults heal: hung calls go on."""
    thawed: dict[str, asyncio.Event] = field(default_factory=dict)
    """Per node, cleared while the node is frozen."""

    async def gate(self, node: str) -> None:
        """Wait while `node` is frozen."""
        thawed = self.thawed.get(node)
        if thawed is not None:
            await thawed.wait()

    def freeze(self, node: str) -> None:
        """Stop `node`'s models and tools where they are."""
        self.thawed.setdefault(node, asyncio.Event()).clear()

    def thaw(self, node: str) -> None:
        """Let `node`'s models and tools go on."""
        self.thawed.setdefault(node, asyncio.Event()).set()


class World:
    """The scenarios whose sessions the shared registry's agents serve, by id prefix."""

    def __init__(self) -> None:
        self.stages: dict[str, Stage] = {}

    def stage(self, session_id: str) -> Stage:
        """The scenario of a session."""
        return self.stages[session_id.split("-", 1)[0]]

    def begin(self, plan: Plan) -> Stage:
        """Serve a new scenario."""
        stage = Stage(plan)
        self.stages[plan.prefix] = stage
        return stage

    def end(self, plan: Plan) -> None:
        """Forget a scenario."""
        self.stages.pop(plan.prefix, None)


def _token(key: CallKey) -> str:
    return f"{key.index}.{key.position}"


class PlannedModel(Model):
    """A model that answers from its scenario's plan, faults included."""

    def __init__(self, world: World, agent_type: str) -> None:
        self.world = world
        self.agent_type = agent_type

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Record the call, then answer (or fail) as the plan says."""
        stage = self.world.stage(request.session_id)
        node = NODE.get()
        index = len(request.messages)
        key = CallKey(request.session_id, index)
        attempt = stage.ledger.call(node, key)
        plan = stage.plan
        await stage.gate(node)
        fault = plan.model_fault(key, attempt)
        await asyncio.sleep(plan.pause(key, attempt))
        if fault == "raise":
            raise RuntimeError(f"The model failed (injected, {key})")
        if fault == "hang":
            await stage.healed.wait()
        await stage.gate(node)
        text, calls = self._response(plan, request, index, fault)
        half = len(text) // 2
        for piece in (text[:half], text[half:]):
            if piece:
                yield TextDelta(piece)
        for call in calls:
            yield ToolCallReady(call)

    def _response(
        self, plan: Plan, request: ModelRequest, index: int, fault: ModelFault | None
    ) -> tuple[str, list[ToolCall]]:
        turn = sum(1 for message in request.messages if message.role == "assistant")
        turns = plan.turns(request.session_id, self.agent_type)
        text = f"{self.agent_type} turn {turn}"
        asked: list[tuple[str, dict[str, Any] | str]]
        if turn < len(turns):
            asked = [
                (name, {**args, "token": f"{index}.{position}"} if name == "work" else args)
                for position, (name, args) in enumerate(turns[turn])
            ]
        elif self.agent_type == "root":
            asked = []
            text = f"root done after {turn} turns"
        else:
            asked = [("__finish__", {"done": request.session_id})]
        if fault == "bad_args" and asked:
            asked[0] = (asked[0][0], '{"message": "unterminated')
        elif fault == "unknown_tool":
            asked.append(("no_such_tool", {"x": 1}))
        elif fault == "nan_args" and asked and isinstance(asked[0][1], dict):
            asked[0] = (asked[0][0], {**asked[0][1], "nan": float("nan")})
        elif fault == "huge_text":
            text += " " + "x" * HUGE
        elif fault == "nul_text":
            text += " nul\x00here"
        elif fault == "surrogate_text":
            text += " lone\ud800surrogate"
        calls = [
            ToolCall(name, arguments, id=plan.call_id(index, position))
            for position, (name, arguments) in enumerate(asked)
        ]
        return text, calls


class _Unserialisable:
    """A tool result that is not JSON."""


def build_registry(world: World) -> AgentRegistry:
    """The root, mid and leaf agents over `world`'s scenarios."""

    async def work(input: Work, ctx: ToolContext[Any]) -> Any:
        stage = world.stage(ctx.session_id)
        node = NODE.get()
        index, _, position = input.token.partition(".")
        key = CallKey(ctx.session_id, int(index), int(position))
        attempt = stage.ledger.call(node, key)
        await stage.gate(node)
        fault = stage.plan.tool_fault(key, attempt)
        await asyncio.sleep(stage.plan.pause(key, attempt))
        if fault == "raise":
            raise RuntimeError(f"The tool failed (injected, {key})")
        if fault == "hang":
            await stage.healed.wait()
        await stage.gate(node)
        if fault == "non_json":
            return _Unserialisable()
        if fault == "nan":
            return {"token": input.token, "value": float("nan")}
        if fault == "huge":
            return "y" * HUGE
        if fault == "nul":
            return f"nul\x00{input.token}"
        if fault == "surrogate":
            return f"lone\udfff{input.token}"
        return {"token": input.token}

    work_tool = define_tool("work", description="Do some work.", input_schema=Work)(work)
    ask = define_tool("ask", description="Ask the client.", input_schema=Question)
    leaf = define_agent(
        "leaf",
        tools=[work_tool],
        output_schema=Done,
        model=PlannedModel(world, "leaf"),
        max_steps=8,
    )
    mid = define_agent(
        "mid",
        tools=[work_tool, create_sub_agent_tool(leaf, Job)],
        output_schema=Done,
        model=PlannedModel(world, "mid"),
        max_steps=8,
    )
    root = define_agent(
        "root",
        tools=[work_tool, ask, create_sub_agent_tool(mid, Job), create_sub_agent_tool(leaf, Job)],
        model=PlannedModel(world, "root"),
        max_steps=10,
    )
    return AgentRegistry([root, mid, leaf])
