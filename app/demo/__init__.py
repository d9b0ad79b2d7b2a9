"""The bundled demo agents, so a fresh server offline shows a live tree of agents doing real work.

`registry` (the server's default `AGENT_MODULE`, `app.demo:registry`) holds a coordinator,
`text-analyst`, that hands a text to three specialists in parallel (`text-stats`, `sentiment`,
and `topics`, which delegates to `keywords` in turn) and reports what they found; `trip-planner`,
whose `book` tool, two levels down, waits for a person's approval; and `research-lead`, which
keeps persistent `researcher` children through the companion tools. The tools do
the analysis for real, in plain Python. With `MODEL_NAME` (and `MODEL_BASE_URL`,
`MODEL_API_KEY`) set, a real model drives every agent; otherwise deterministic brains do, each
response taking `DEMO_LATENCY` seconds (0.4 by default) so the stream can be watched live:

    curl -s localhost:8000/start -H 'content-type: application/json' \\
      -d '{"agentType": "text-analyst", "message": "Analyse: The garden is beautiful."}'
    curl -N localhost:8000/stream/<sessionId>
"""

from __future__ import annotations

import os

from app.demo.agents import (
    DEFAULT_LATENCY,
    ModelFactory,
    build_registry,
    latency_from_env,
    registry_from_env,
)
from app.demo.names import COORDINATOR

__all__ = [
    "COORDINATOR",
    "DEFAULT_LATENCY",
    "ModelFactory",
    "build_registry",
    "latency_from_env",
    "registry",
    "registry_from_env",
]

registry = registry_from_env(os.environ)
"""The demo agents as this process's environment configures them."""
