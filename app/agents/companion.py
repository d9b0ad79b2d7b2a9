"""The companion tools: how an agent with `persistent_agents` manages its long-lived children.

`define_agent` gives such an agent six tools named `companion__...`, with these arguments:
spawn a child (`spawnAgent {agent, initialMessage, name?}`), tell it something
(`sendMessage {name, message}`), list the children (`listChildren {}`), look at one
(`getChildStatus {name}`), wait for one to finish (`waitForResult {name}`, only when some
child is blocking) and stop one for good (`terminateChild {name}`). What they do is the
runtime's (app/runtime/companions.py); see docs/architecture.md, "Persistent children".
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from app.agents.agent import AgentConfig, PersistentAgent
from app.agents.tools import Offered
from app.errors import DefinitionError

COMPANION_PREFIX = "companion__"

Action = Literal["spawn", "send", "list", "status", "wait", "terminate"]
"""What a companion tool does."""

TOOL_NAMES: dict[Action, str] = {
    "spawn": "companion__spawnAgent",
    "send": "companion__sendMessage",
    "list": "companion__listChildren",
    "status": "companion__getChildStatus",
    "wait": "companion__waitForResult",
    "terminate": "companion__terminateChild",
}

CHILD_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
"""A persistent child's name: it ends its session id, `{parent}-agent-{name}`."""
CHILD_NAME = re.compile(CHILD_NAME_PATTERN)

_DESCRIPTIONS: dict[Action, str] = {
    "spawn": (
        "Create and start a persistent child agent. A blocking child runs to completion and "
        "its output is the result; a non-blocking one runs in the background and you get a "
        "notice when it ends. Spawning an existing name continues a completed child (it keeps "
        "its memory) and starts a failed or terminated one afresh."
    ),
    "send": (
        "Send a follow-up message to a child by name: a finished child continues with its "
        "memory (a blocking one answers with its new output); a running one reads the message "
        "before its next step."
    ),
    "list": "List your persistent children: name, agent type, session id and status.",
    "status": "The status of one child by name, with its output or error once it has ended.",
    "wait": "Wait until a child has finished and get its output (or its error).",
    "terminate": "Stop a child, and its own children, for good.",
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NameInput(_Strict):
    """Which child."""

    name: str = Field(description="The child's name.")


class SendInput(_Strict):
    """The child, and what to tell it."""

    name: str = Field(description="The child's name.")
    message: str = Field(description="What to tell it.")


class ListInput(_Strict):
    """No arguments."""


class SpawnInput(_Strict):
    """The kind of child, its task, and optionally its name."""

    agent: str
    initialMessage: str
    name: str | None = None


def spawn_input(agents: Sequence[PersistentAgent]) -> type[SpawnInput]:
    """`spawnAgent`'s input, its `agent` an enum of the configured types, described."""
    types = tuple(entry.agent.name for entry in agents)
    described = "; ".join(
        f"{entry.agent.name} ({entry.mode}): "
        f"{entry.description or entry.agent.description or 'no description'}"
        for entry in agents
    )
    agent_type: Any = Literal[types]  # a Literal of the configured names, known only now

    def as_enum(schema: dict[str, Any]) -> None:
        schema.pop("const", None)  # one name is still a list of choices
        schema["enum"] = list(types)

    return create_model(
        "SpawnAgentInput",
        __base__=SpawnInput,
        __doc__=SpawnInput.__doc__,
        agent=(
            agent_type,
            Field(
                description=f"The kind of child to start. {described}", json_schema_extra=as_enum
            ),
        ),
        initialMessage=(str, Field(description="The child's first message: its task.")),
        name=(
            str | None,
            Field(
                None,
                description="A name to know it by (letters, digits, '-' and '_'); by default "
                "`<agent>-<n>`.",
            ),
        ),
    )


@dataclass(frozen=True, eq=False)
class CompanionTool(Offered):
    """One of the companion tools of an agent with persistent children."""

    name: str
    description: str
    input_schema: type[BaseModel]
    action: Action
    agents: tuple[PersistentAgent, ...]

    def persistent(self, agent_type: str) -> PersistentAgent | None:
        """The configured child of this type, if any."""
        return next((entry for entry in self.agents if entry.agent.name == agent_type), None)


def companion_tools(owner: str, agents: Sequence[PersistentAgent]) -> list[CompanionTool]:
    """The companion tools of an agent with these persistent children, checked: each entry
    a `PersistentAgent` whose agent has an output schema, each agent type once."""
    seen: set[str] = set()
    for entry in agents:
        if not isinstance(entry, PersistentAgent):
            raise DefinitionError(
                f"{owner}: persistent_agents takes PersistentAgent entries, got {entry!r}"
            )
        if not isinstance(entry.agent, AgentConfig):
            raise DefinitionError(
                f"{owner}: PersistentAgent needs an agent from define_agent, got {entry.agent!r}"
            )
        child = entry.agent.name
        if child in seen:
            raise DefinitionError(
                f"{owner}: agent type {child!r} appears more than once in persistent_agents "
                "(define a second agent with another name to use it in both modes)"
            )
        seen.add(child)
        if entry.agent.output_schema is None:
            raise DefinitionError(
                f"{owner}: persistent agent {child!r} needs an output_schema (its output is "
                "what the parent gets)"
            )
    entries = tuple(agents)
    inputs: dict[Action, type[BaseModel]] = {
        "spawn": spawn_input(entries),
        "send": SendInput,
        "list": ListInput,
        "status": NameInput,
        "wait": NameInput,
        "terminate": NameInput,
    }
    blocking = any(entry.mode == "blocking" for entry in entries)
    return [
        CompanionTool(TOOL_NAMES[action], _DESCRIPTIONS[action], schema, action, entries)
        for action, schema in inputs.items()
        if action != "wait" or blocking
    ]
