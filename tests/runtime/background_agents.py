"""Agents for the background-delegation tests: workers that can be held at a gate (to see the
queue), and leads scripted step by step whose model requests are kept."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from app import Delegation, define_agent
from app.agents import AgentConfig
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
from app.protocol import SystemMessage, ToolMessage, UserMessage


@dataclass
class Gate:
    """Holds workers until opened; counts who started, in order, and how many at once."""

    opened: asyncio.Event = field(default_factory=asyncio.Event)
    started: list[str] = field(default_factory=list)
    active: int = 0
    most: int = 0

    def open(self) -> None:
        self.opened.set()


def worker(gate: Gate | None = None, *, name: str = "worker", **options: Any) -> AgentConfig:
    """Answers its task in the summary envelope, once `gate` (if any) is open. A task that
    says `sleep N` takes N seconds; one that says `fail` fails."""

    async def model(request: ModelRequest) -> ModelResponse:
        task = next(m.content for m in request.messages if isinstance(m, UserMessage))
        if gate is not None:
            gate.started.append(task)
            gate.active += 1
            gate.most = max(gate.most, gate.active)
            try:
                await gate.opened.wait()
            finally:
                gate.active -= 1
        if task.startswith("sleep "):
            await asyncio.sleep(float(task.split()[1]))
        if "fail" in task:
            raise RuntimeError(f"cannot do {task!r}")
        return ModelResponse(
            text="<subagent_background_result><summary>did "
            f"{task}</summary><full_result>All of {task}, done.</full_result>"
            "</subagent_background_result>"
        )

    options.setdefault("description", "Does one job.")
    return define_agent(name, model=FunctionModel(model), **options)


class Unchecked(Model):
    """Plays `fn`'s responses, tool calls the agent was not offered included (a real model may
    make them; the test doubles refuse to)."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        response = self.fn(request)
        if response.text:
            yield TextDelta(response.text)
        for call in response.tool_calls:
            yield ToolCallReady(call)


Step = Sequence[ToolCall]


def delegate(call_id: str, prompt: str, **arguments: Any) -> ToolCall:
    """A `subagent` call (background unless told)."""
    arguments.setdefault("category", "worker")
    arguments.setdefault("background", True)
    return ToolCall("subagent", {"prompt": prompt, **arguments}, id=call_id)


def control(call_id: str, action: str, **arguments: Any) -> ToolCall:
    """A control call: `status`, `result`, `cancel` or `wait`."""
    return ToolCall(f"subagent_{action}", arguments, id=call_id)


@dataclass
class Lead:
    """A lead scripted by steps; `requests` keeps what its model was asked."""

    steps: Sequence[Step]
    requests: list[ModelRequest] = field(default_factory=list)

    def agent(
        self,
        delegation: Delegation,
        *,
        name: str = "lead",
        unchecked: bool = False,
        **options: Any,
    ) -> AgentConfig:
        """The lead (`unchecked`: its model may call tools it was not offered)."""

        def model(request: ModelRequest) -> ModelResponse:
            self.requests.append(request)
            turn = sum(m.role == "assistant" for m in request.messages)
            if turn < len(self.steps):
                return ModelResponse(tool_calls=list(self.steps[turn]))
            return ModelResponse(text=json.dumps(self.answers(request.messages)))

        played: Model = Unchecked(model) if unchecked else FunctionModel(model)
        return define_agent(name, model=played, delegation=delegation, **options)

    @staticmethod
    def answers(messages: Sequence[Any]) -> dict[str, Any]:
        """What each call of the conversation answered, by call id; the notices in order."""
        found: dict[str, Any] = {"notices": []}
        for message in messages:
            if isinstance(message, ToolMessage):
                found[message.tool_call_id] = (
                    f"error: {message.error}" if message.error else message.result
                )
            elif isinstance(message, SystemMessage):
                found["notices"].append(message.content)
        return found
