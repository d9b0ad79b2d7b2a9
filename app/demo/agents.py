"""The demo's agent trees, wired to a real model when one is configured, else to the brains.

text-analyst              coordinator: delegates in parallel, writes a short text report
├── text-stats            count_text (async) + readability (sync)  -> TextStats
├── sentiment             score_sentiment                          -> SentimentScore
└── topics                keywords sub-agent, then key_sentences   -> Topics
    └── keywords          extract_keywords                         -> Keywords

trip-planner              plans a stay, reports the booking
└── itinerary             find_hotels, then the booker sub-agent   -> TripPlan
    └── booker            book (requires approval)                 -> Booking

research-lead             persistent children through the companion tools
├── researcher            persistent, blocking: lookup_topic       -> Findings
└── topics                persistent, non-blocking (as above)      -> Topics

briefing-desk             background delegation: subagent, subagent_wait, subagent_result
└── analyst               a subagent category: lookup_topic        -> text (summary envelope)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from pydantic import BaseModel

from app.agents import (
    AgentConfig,
    AgentRegistry,
    Delegation,
    PersistentAgent,
    SubAgentTool,
    Tool,
    create_sub_agent_tool,
    define_agent,
)
from app.demo import tools
from app.demo.brains import BRAINS
from app.demo.names import (
    ANALYST,
    BOOKER,
    BRIEFING_DESK,
    COORDINATOR,
    ITINERARY,
    KEYWORDS,
    RESEARCH_LEAD,
    RESEARCHER,
    SENTIMENT,
    TEXT_STATS,
    TOPICS,
    TRIP_PLANNER,
)
from app.demo.prompts import PROMPTS
from app.demo.schemas import (
    Booking,
    BookingRequest,
    Findings,
    Keywords,
    SentimentScore,
    TextInput,
    TextStats,
    Topics,
    TripPlan,
    TripRequest,
)
from app.errors import DefinitionError
from app.models import FunctionModel, Model
from app.models.openai import openai_model_from_env

ModelFactory = Callable[[str], Model]
"""Given a demo agent's name, the model that agent should use."""

DEFAULT_LATENCY = 0.4
"""Seconds each brain response takes, so a person watching the stream sees the tree unfold."""

SPECIALIST_MAX_STEPS = 6
"""Room for a real model to fix a bad call or two; the brains need 2 or 3 steps."""

COORDINATOR_MAX_STEPS = 6
"""Delegate, report, and room for a real model that delegates one call at a time."""

RESEARCH_LEAD_MAX_STEPS = 10
"""Per turn: spawn, follow up, report (the brain needs 3), and room for a real model that
spawns one child at a time or looks at them between steps."""

CHILD_TIMEOUT = 300.0
"""Seconds a child run may take, so a stuck real model cannot hold the coordinator forever."""


def build_registry(
    model_factory: ModelFactory | None = None, *, latency: float = DEFAULT_LATENCY
) -> AgentRegistry:
    """A registry of the demo agents. Each uses `model_factory(agent_name)` when given, else its
    deterministic brain as a `FunctionModel` spending `latency` seconds per response."""

    def model_for(name: str) -> Model:
        if model_factory is not None:
            return model_factory(name)
        return FunctionModel(BRAINS[name], latency=latency)

    def agent(
        name: str,
        description: str,
        agent_tools: Sequence[Tool | SubAgentTool],
        *,
        output_schema: type[BaseModel] | None = None,
        max_steps: int = SPECIALIST_MAX_STEPS,
        persistent_agents: Sequence[PersistentAgent] = (),
        delegation: Delegation | None = None,
    ) -> AgentConfig:
        return define_agent(
            name,
            description=description,
            system_prompt=PROMPTS[name],
            tools=agent_tools,
            output_schema=output_schema,
            model=model_for(name),
            max_steps=max_steps,
            persistent_agents=persistent_agents,
            delegation=delegation,
        )

    keywords = agent(
        KEYWORDS,
        "Finds a text's most frequent content words, stop words left out.",
        [tools.extract_keywords],
        output_schema=Keywords,
    )
    topics = agent(
        TOPICS,
        "Finds what a text is about: asks the keywords agent for its keywords, then picks the "
        "sentence that covers them best as a summary.",
        [
            create_sub_agent_tool(
                keywords,
                TextInput,
                description="Ask the keywords agent for the text's most frequent content words.",
                timeout=CHILD_TIMEOUT,
            ),
            tools.key_sentences,
        ],
        output_schema=Topics,
    )
    text_stats = agent(
        TEXT_STATS,
        "Measures a text: words, sentences, characters, syllables and readability "
        "(Flesch reading ease and grade).",
        [tools.count_text, tools.readability],
        output_schema=TextStats,
    )
    sentiment = agent(
        SENTIMENT,
        "Judges a text's tone with a built-in, negation-aware word lexicon.",
        [tools.score_sentiment],
        output_schema=SentimentScore,
    )
    coordinator = agent(
        COORDINATOR,
        "Analyses a text you send: delegates to the text-stats, sentiment and topics "
        "specialists in parallel and answers with a short report.",
        [
            create_sub_agent_tool(
                child,
                TextInput,
                description=f"{child.description} Pass the text to analyse verbatim.",
                timeout=CHILD_TIMEOUT,
            )
            for child in (text_stats, sentiment, topics)
        ],
        max_steps=COORDINATOR_MAX_STEPS,
    )

    booker = agent(
        BOOKER,
        "Books the hotel it is given for the nights asked; every booking waits for a person's "
        "approval.",
        [tools.book],
        output_schema=Booking,
    )
    itinerary = agent(
        ITINERARY,
        "Plans a stay: finds the city's best rated hotel and has the booker book it.",
        [
            tools.find_hotels,
            create_sub_agent_tool(
                booker,
                BookingRequest,
                description="Have the booker book this hotel (a person approves it first).",
                timeout=CHILD_TIMEOUT,
            ),
        ],
        output_schema=TripPlan,
    )
    trip_planner = agent(
        TRIP_PLANNER,
        "Plans a stay in a city and books its hotel once you approve, two levels down: send "
        'e.g. "Plan a trip: 3 nights in Lisbon".',
        [
            create_sub_agent_tool(
                itinerary,
                TripRequest,
                description="Have the itinerary agent pick a hotel for the stay and book it.",
                timeout=CHILD_TIMEOUT,
            )
        ],
        max_steps=COORDINATOR_MAX_STEPS,
    )

    researcher = agent(
        RESEARCHER,
        "Looks a topic up in the built-in library and remembers what it reported.",
        [tools.lookup_topic],
        output_schema=Findings,
    )
    research_lead = agent(
        RESEARCH_LEAD,
        "Leads persistent researchers: spawns one per topic, asks one a follow-up, has the "
        'facts digested in the background. Send e.g. "Research: solar power and wind power", '
        'then later "What are they doing?" or "Thanks, we are done".',
        [],
        max_steps=RESEARCH_LEAD_MAX_STEPS,
        persistent_agents=[
            PersistentAgent(
                researcher,
                mode="blocking",
                description="Looks its topic up in the library; spawn it again by name to "
                "ask a follow-up: it remembers what it told you.",
            ),
            PersistentAgent(
                topics,
                mode="non-blocking",
                description="Digests a text in the background (its topics and the sentence "
                "that sums it up); you hear of its end in a notice.",
            ),
        ],
    )
    analyst = agent(
        ANALYST,
        "Looks a topic up in the built-in library; answers with a summary and every fact.",
        [tools.lookup_topic],
    )
    briefing_desk = agent(
        BRIEFING_DESK,
        "Briefs you on topics, one analyst per topic working in the background, read through "
        'their summaries. Send e.g. "Research: solar power and wind power".',
        [],
        max_steps=RESEARCH_LEAD_MAX_STEPS,
        delegation=Delegation([analyst], default_timeout=CHILD_TIMEOUT),
    )
    return AgentRegistry([coordinator, trip_planner, research_lead, briefing_desk])


def latency_from_env(environ: Mapping[str, str]) -> float:
    """`DEMO_LATENCY` in seconds (a number >= 0), else `DEFAULT_LATENCY`."""
    raw = environ.get("DEMO_LATENCY", "").strip()
    if not raw:
        return DEFAULT_LATENCY
    try:
        latency = float(raw)
    except ValueError:
        raise DefinitionError(f"DEMO_LATENCY must be a number of seconds, got {raw!r}") from None
    if not (math.isfinite(latency) and latency >= 0):
        raise DefinitionError(f"DEMO_LATENCY must be a finite number >= 0, got {raw!r}")
    return latency


def registry_from_env(environ: Mapping[str, str]) -> AgentRegistry:
    """The demo as the environment configures it: every agent on the real model that
    `MODEL_BASE_URL`, `MODEL_API_KEY` and `MODEL_NAME` name, else on the brains with
    `DEMO_LATENCY`."""
    model = openai_model_from_env(environ)
    if model is None:
        return build_registry(latency=latency_from_env(environ))
    # One model (one connection pool) serves every agent.
    return build_registry(lambda _name: model)
