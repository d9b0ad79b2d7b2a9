"""The agents the fault tests' server processes serve (`AGENT_MODULE=tests.faults.agents:registry`).

- `lead`, `worker`, `checker`: the end-to-end tree of `tests.e2e.agents` (three workers in
  parallel, each with a checker), whose calls go to the call log (`E2E_CALL_LOG`).
- `researcher`: searches `RESEARCH_STEPS` times, one step at a time, then finishes with its
  findings: a remote child long enough to be killed in the middle of its stream.
- `batch`: three steps of five `stamp` calls each; its model thinks for half a second before it
  answers, inside the call (so a process frozen then answers, after a thaw, before anything
  else it had to do: its tools start in the same turn of its event loop).
- `orchestrator` (only when `FAULT_REMOTE_URL` names a remote server): delegates one query to
  that server's `researcher`, then answers `findings=...`, or `FAILED: ...` when the remote
  call failed.

Every model and tool call is logged before it does anything, with the process id.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from pydantic import BaseModel

from app import (
    AgentRegistry,
    HttpRemoteAgentTransport,
    create_remote_sub_agent_tool,
    define_agent,
    define_tool,
)
from app.agents import AgentConfig, ToolContext
from app.models import FunctionModel, ModelRequest, ModelResponse, ToolCall
from app.protocol import AssistantMessage, ToolMessage
from tests.e2e.agents import checker, lead, log_call, worker

REMOTE_URL_ENV = "FAULT_REMOTE_URL"
RESEARCH_STEPS = 6
SEARCH_SECONDS = 0.25


class Query(BaseModel):
    query: str


class Findings(BaseModel):
    findings: list[str]


def _turn(request: ModelRequest) -> int:
    return sum(1 for message in request.messages if isinstance(message, AssistantMessage))


@define_tool("search", description="Search.", input_schema=Query)
async def search(input: Query, ctx: ToolContext[Any]) -> str:
    log_call("tool", ctx.session_id, ctx.tool_call_id)
    await asyncio.sleep(SEARCH_SECONDS)
    return f"found {input.query}"


def researcher_model(request: ModelRequest) -> ModelResponse:
    turn = _turn(request)
    log_call("model", request.session_id, str(turn))
    if turn < RESEARCH_STEPS:
        return ModelResponse(
            text=f"searching q{turn}", tool_calls=[ToolCall("search", {"query": f"q{turn}"})]
        )
    found = [m.result for m in request.messages if isinstance(m, ToolMessage)]
    return ModelResponse(tool_calls=[ToolCall("__finish__", {"findings": found})])


researcher = define_agent(
    "researcher",
    description="Searches, one step at a time.",
    tools=[search],
    output_schema=Findings,
    model=FunctionModel(researcher_model, latency=0.1),
)


class Stamp(BaseModel):
    n: int


@define_tool("stamp", description="Stamp a number.", input_schema=Stamp)
async def stamp(input: Stamp, ctx: ToolContext[Any]) -> int:
    log_call("tool", ctx.session_id, ctx.tool_call_id)
    await asyncio.sleep(0.2)
    return input.n


BATCH_STEPS = 3
BATCH_THINKING = 0.5


async def batch_model(request: ModelRequest) -> ModelResponse:
    turn = _turn(request)
    log_call("model", request.session_id, str(turn))
    await asyncio.sleep(BATCH_THINKING)
    if turn < BATCH_STEPS:
        return ModelResponse(tool_calls=[ToolCall("stamp", {"n": turn * 5 + i}) for i in range(5)])
    return ModelResponse(text=f"stamped {sum(1 for m in request.messages if m.role == 'tool')}")


batch = define_agent(
    "batch", description="Stamps in batches.", tools=[stamp], model=FunctionModel(batch_model)
)


def orchestrator(url: str) -> AgentConfig:
    """Delegates one query to the researcher of the server at `url`."""
    tool = create_remote_sub_agent_tool(
        "researcher",
        description="Research on the research server.",
        input_schema=Query,
        output_schema=Findings,
        transport=HttpRemoteAgentTransport(url),
        remote_agent_type="researcher",
    )

    def model(request: ModelRequest) -> ModelResponse:
        log_call("model", request.session_id, str(_turn(request)))
        answers = [m for m in request.messages if isinstance(m, ToolMessage)]
        if not answers:
            return ModelResponse(
                text="asking the researcher", tool_calls=[ToolCall(tool.name, {"query": "solar"})]
            )
        answer = answers[-1]
        if answer.error is not None:
            return ModelResponse(text=f"FAILED: {answer.error}")
        return ModelResponse(text=f"findings={answer.result}")

    return define_agent("orchestrator", tools=[tool], model=FunctionModel(model, latency=0.05))


_agents = [lead, worker, checker, researcher, batch]
if os.environ.get(REMOTE_URL_ENV):
    _agents.append(orchestrator(os.environ[REMOTE_URL_ENV]))
registry = AgentRegistry(_agents)
