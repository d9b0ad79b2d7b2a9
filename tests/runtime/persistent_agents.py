"""Agents for the persistent-children tests: researchers that remember what they were told, and
coordinators scripted step by step."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel

from app import PersistentAgent, define_agent
from app.agents import AgentConfig
from app.models import FunctionModel, ModelRequest, ModelResponse, ToolCall
from app.protocol import SystemMessage, ToolMessage, UserMessage
from tests.runtime.agents import Calls


class Findings(BaseModel):
    findings: str


def researcher(
    calls: Calls,
    *,
    name: str = "researcher",
    latency: float = 0.01,
    slow_on: str | None = None,
    fail_on: str | None = None,
) -> AgentConfig:
    """Finishes at once with everything it was told so far (its memory), `; `-joined. A task
    containing `slow_on` takes 0.5 s per step; one containing `fail_on` fails."""

    def model(request: ModelRequest) -> Any:
        told = [m.content for m in request.messages if isinstance(m, UserMessage)]
        turn = sum(m.role == "assistant" for m in request.messages)
        calls[f"model {request.session_id} {turn}"] += 1

        async def answer() -> ModelResponse:
            await asyncio.sleep(0.5 if slow_on and slow_on in told[-1] else latency)
            if fail_on and fail_on in told[-1]:
                raise RuntimeError(f"cannot research {told[-1]!r}")
            return ModelResponse(tool_calls=[ToolCall("__finish__", {"findings": "; ".join(told)})])

        return answer()

    return define_agent(
        name, description="Researches a topic.", output_schema=Findings, model=FunctionModel(model)
    )


Step = Sequence[ToolCall]


def coordinator(
    calls: Calls,
    child: AgentConfig,
    steps: Sequence[Step],
    *,
    mode: Literal["blocking", "non-blocking"] = "blocking",
    name: str = "coordinator",
) -> AgentConfig:
    """Makes `steps` one model call each, then answers with every result and notice it got,
    one per line (`<call id>: <result JSON>` or `notice: <text>`)."""

    def model(request: ModelRequest) -> ModelResponse:
        turn = sum(m.role == "assistant" for m in request.messages)
        calls[f"model {request.session_id} {turn}"] += 1
        if turn < len(steps):
            return ModelResponse(tool_calls=list(steps[turn]))
        lines = []
        for message in request.messages:
            if isinstance(message, ToolMessage):
                shown = message.result if message.error is None else f"error: {message.error}"
                lines.append(f"{message.tool_call_id}: {json.dumps(shown)}")
            elif isinstance(message, SystemMessage):
                lines.append(f"notice: {message.content}")
        return ModelResponse(text="\n".join(lines))

    return define_agent(
        name,
        persistent_agents=[PersistentAgent(child, mode=mode)],
        model=FunctionModel(model, latency=0.01),
    )


def spawn(call_id: str, task: str, name: str | None = None) -> ToolCall:
    arguments: dict[str, Any] = {"agent": "researcher", "initialMessage": task}
    if name is not None:
        arguments["name"] = name
    return ToolCall("companion__spawnAgent", arguments, id=call_id)


def send(call_id: str, name: str, message: str) -> ToolCall:
    return ToolCall("companion__sendMessage", {"name": name, "message": message}, id=call_id)


def named(action: str, call_id: str, name: str | None = None) -> ToolCall:
    tool = {
        "list": "companion__listChildren",
        "status": "companion__getChildStatus",
        "wait": "companion__waitForResult",
        "terminate": "companion__terminateChild",
    }[action]
    return ToolCall(tool, {} if name is None else {"name": name}, id=call_id)


def answers(output: str) -> dict[str, Any]:
    """A coordinator's final answer, by call id (notices under `notice`, in order)."""
    found: dict[str, Any] = {"notice": []}
    for line in output.splitlines():
        key, _, value = line.partition(": ")
        if key == "notice":
            found["notice"].append(value)
        else:
            found[key] = value if value.startswith("error") else json.loads(value)
    return found
