"""`GET /agents`: what this server can run, with the schemas of what goes in and out."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from app.agents import AgentConfig, AgentRegistry
from app.api.deps import runtime_of
from app.api.documented import errors
from app.api.routing import ApiRoute
from app.protocol.api import AgentInfo

router = APIRouter(tags=["agents"], route_class=ApiRoute)


def describe_agents(registry: AgentRegistry) -> list[AgentInfo]:
    """Every registered agent with its input schema (from a sub-agent tool that wraps it, if
    any) and its output schema."""
    described = []
    for agent in registry:
        schema = registry.input_schema(agent.name)
        described.append(_describe(agent, None if schema is None else schema.model_json_schema()))
    return described


def _describe(agent: AgentConfig, input_schema: dict[str, Any] | None) -> AgentInfo:
    output: dict[str, Any] = (
        agent.output_schema.model_json_schema() if agent.output_schema else {"type": "string"}
    )
    return AgentInfo(
        name=agent.name,
        description=agent.description,
        input_schema=input_schema,
        output_schema=output,
        tools=[tool.name for tool in agent.tools],
    )


@router.get(
    "/agents",
    response_model=list[AgentInfo],
    responses=errors(503),
    summary="The registered agents",
)
async def agents(request: Request) -> JSONResponse:
    """The agents this server runs, with their input and output JSON schemas and tools."""
    return JSONResponse(
        [info.model_dump(by_alias=True) for info in describe_agents(runtime_of(request).registry)]
    )
