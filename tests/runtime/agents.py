"""Agents shared by the runtime tests: a parent delegating to children that add numbers."""

from __future__ import annotations

from collections import Counter
from typing import Any

from pydantic import BaseModel

from app import AgentRegistry, create_sub_agent_tool, define_agent, define_tool
from app.agents import AgentConfig, AgentHooks, ToolContext
from app.models import FunctionModel, ModelRequest, ModelResponse, ToolCall
from app.protocol import ToolMessage, UserMessage


class AddInput(BaseModel):
    a: int
    b: int


class Task(BaseModel):
    task: str
    a: int
    b: int


class Sum(BaseModel):
    total: int


class Calls(Counter[str]):
    """Counts model and tool calls by name."""


def add_tool(calls: Calls) -> Any:
    async def add(input: AddInput, ctx: ToolContext[Any]) -> int:
        calls["add"] += 1
        return input.a + input.b

    return define_tool("add", description="Add two integers.", input_schema=AddInput)(add)


def adder(
    calls: Calls, *, name: str = "adder", latency: float = 0.0, **options: Any
) -> AgentConfig:
    """A child: asks for `add(a, b)` from its JSON task, then finishes with the sum."""

    def model(request: ModelRequest) -> ModelResponse:
        calls[f"model:{name}"] += 1
        last = request.messages[-1]
        if isinstance(last, ToolMessage):
            return ModelResponse(tool_calls=[ToolCall("__finish__", {"total": last.result})])
        assert isinstance(last, UserMessage)
        task = Task.model_validate_json(last.content)
        return ModelResponse(
            text=f"adding {task.a}+{task.b}",
            tool_calls=[ToolCall("add", {"a": task.a, "b": task.b})],
        )

    return define_agent(
        name,
        description="Adds two numbers.",
        tools=[add_tool(calls)],
        output_schema=Sum,
        model=FunctionModel(model, latency=latency),
        **options,
    )


def delegator(
    calls: Calls,
    child: AgentConfig,
    *,
    name: str = "parent",
    fan_out: int = 3,
    latency: float = 0.0,
    output_schema: type[BaseModel] | None = None,
    timeout: float | None = None,
    hooks: AgentHooks | None = None,
) -> AgentConfig:
    """A parent: delegates `fan_out` tasks at once, then reports the results it got."""
    tool = create_sub_agent_tool(child, Task, timeout=timeout)

    def model(request: ModelRequest) -> ModelResponse:
        calls[f"model:{name}"] += 1
        results = [m.result for m in request.messages if isinstance(m, ToolMessage)]
        if not results:
            return ModelResponse(
                tool_calls=[
                    ToolCall(tool.name, {"task": f"t{i}", "a": i, "b": 10}) for i in range(fan_out)
                ]
            )
        if output_schema is not None:
            total = sum(r["total"] for r in results if isinstance(r, dict) and "total" in r)
            return ModelResponse(tool_calls=[ToolCall("__finish__", {"total": total})])
        return ModelResponse(text="results: " + "; ".join(str(r) for r in results))

    return define_agent(
        name,
        tools=[tool],
        model=FunctionModel(model, latency=latency),
        output_schema=output_schema,
        hooks=hooks,
    )


def registry(*agents: AgentConfig) -> AgentRegistry:
    return AgentRegistry(agents)
