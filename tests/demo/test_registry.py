"""The demo registry: every agent, described and well named, on the brains or on a real model."""

from __future__ import annotations

import asyncio
import re

import pytest

import app.demo
from app.agents import AgentConfig, AgentRegistry, CompanionTool, SubAgentTool
from app.agents.agent import AGENT_NAME_PATTERN
from app.demo import DEFAULT_LATENCY, build_registry, latency_from_env, registry_from_env
from app.demo.brains import BRAINS
from app.demo.schemas import (
    Booking,
    Findings,
    Keywords,
    SentimentScore,
    TextStats,
    Topics,
    TripPlan,
)
from app.errors import DefinitionError
from app.models import FunctionModel, Model, ScriptedModel
from app.models.openai import OpenAIChatModel
from app.models.retry import RetryingModel

TREE = {
    "text-analyst": (None, ["subagent__text-stats", "subagent__sentiment", "subagent__topics"]),
    "text-stats": (TextStats, ["count_text", "readability"]),
    "sentiment": (SentimentScore, ["score_sentiment"]),
    "topics": (Topics, ["subagent__keywords", "key_sentences"]),
    "keywords": (Keywords, ["extract_keywords"]),
    "trip-planner": (None, ["subagent__itinerary"]),
    "itinerary": (TripPlan, ["find_hotels", "subagent__booker"]),
    "booker": (Booking, ["book"]),
    "research-lead": (
        None,
        [
            "companion__spawnAgent",
            "companion__sendMessage",
            "companion__listChildren",
            "companion__getChildStatus",
            "companion__waitForResult",
            "companion__terminateChild",
        ],
    ),
    "researcher": (Findings, ["lookup_topic"]),
    "briefing-desk": (
        None,
        ["subagent", "subagent_status", "subagent_result", "subagent_cancel", "subagent_wait"],
    ),
    "analyst": (None, ["lookup_topic"]),
}
"""Each agent's output schema and tools, in the registry's order."""


def test_the_module_attribute_is_a_registry_of_every_agent() -> None:
    assert isinstance(app.demo.registry, AgentRegistry)
    assert [agent.name for agent in app.demo.registry] == list(TREE)


def test_every_agent_and_tool_is_described_and_well_named() -> None:
    registry = build_registry(latency=0)
    for agent in registry:
        assert re.match(AGENT_NAME_PATTERN, agent.name)
        assert (agent.output_schema, [tool.name for tool in agent.tools]) == TREE[agent.name]
        assert agent.description
        for tool in agent.tools:
            assert tool.description
            # A real model is told in the system prompt which tool to call with what.
            assert tool.name in agent.system_prompt
            if isinstance(tool, SubAgentTool):
                assert tool.agent is registry.get(tool.name.removeprefix("subagent__"))
            if isinstance(tool, CompanionTool):
                for entry in tool.agents:
                    assert entry.agent is registry.get(entry.agent.name)
                    assert entry.description
        if agent.output_schema is not None:
            assert "__finish__" in agent.system_prompt


def test_book_waits_for_approval_and_the_lead_keeps_persistent_children() -> None:
    registry = build_registry(latency=0)
    (book,) = registry.get("booker").tools
    assert getattr(book, "requires_approval", False)
    lead = registry.get("research-lead")
    assert [(entry.agent.name, entry.mode) for entry in lead.persistent_agents] == [
        ("researcher", "blocking"),
        ("topics", "non-blocking"),
    ]
    # The digest is the text tree's own topics agent, not a copy.
    assert lead.persistent_agents[1].agent is registry.get("topics")


def models(registry: AgentRegistry) -> dict[str, Model | None]:
    return {agent.name: agent.model for agent in registry}


def test_without_a_model_the_brains_drive_every_agent() -> None:
    registry = build_registry(latency=0.25)
    for agent in registry:
        assert isinstance(agent.model, FunctionModel)
        assert agent.model.fn is BRAINS[agent.name]
        assert agent.model.latency == 0.25


def test_a_model_factory_is_asked_for_every_agent() -> None:
    asked: list[str] = []

    def factory(name: str) -> Model:
        asked.append(name)
        return ScriptedModel([])

    registry = build_registry(factory)
    assert sorted(asked) == sorted(TREE)
    assert all(isinstance(model, ScriptedModel) for model in models(registry).values())


def test_a_configured_real_model_drives_every_agent() -> None:
    # Constructed only: nothing listens on port 9, and nothing is called. A sync test, since
    # building the client (its TLS context) may take longer than the loop watchdog allows.
    registry = registry_from_env(
        {"MODEL_BASE_URL": "http://127.0.0.1:9/v1", "MODEL_NAME": "demo-model"}
    )
    used = set(map(id, models(registry).values()))
    model = registry.get("text-analyst").model
    assert len(used) == 1, "one model, one connection pool, for every agent"
    assert isinstance(model, RetryingModel)
    assert isinstance(model.model, OpenAIChatModel)
    assert model.model.model == "demo-model"
    assert model.name == "OpenAIChatModel(demo-model)"
    assert model.model.base_url == "http://127.0.0.1:9/v1/"
    asyncio.run(model.aclose())


def test_a_half_configured_model_is_a_clear_error() -> None:
    with pytest.raises(DefinitionError, match="MODEL_NAME must name the model"):
        registry_from_env({"MODEL_BASE_URL": "http://127.0.0.1:9/v1"})


@pytest.mark.parametrize(
    ("environ", "latency"),
    [
        ({}, DEFAULT_LATENCY),
        ({"DEMO_LATENCY": ""}, DEFAULT_LATENCY),
        ({"DEMO_LATENCY": " 0 "}, 0.0),
        ({"DEMO_LATENCY": "1.5"}, 1.5),
    ],
)
def test_demo_latency_from_the_environment(environ: dict[str, str], latency: float) -> None:
    assert latency_from_env(environ) == latency
    agent: AgentConfig = registry_from_env(environ).get("keywords")
    assert isinstance(agent.model, FunctionModel)
    assert agent.model.latency == latency


@pytest.mark.parametrize("raw", ["soon", "-1", "nan", "inf"])
def test_a_bad_demo_latency_is_a_clear_error(raw: str) -> None:
    with pytest.raises(DefinitionError, match="DEMO_LATENCY must be a"):
        latency_from_env({"DEMO_LATENCY": raw})
