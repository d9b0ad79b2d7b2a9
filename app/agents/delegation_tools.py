"""The tools of an agent that delegates the seed-004 way: `subagent` and its control tools
`subagent_status`, `subagent_result`, `subagent_cancel` and `subagent_wait`.

`define_agent(..., delegation=...)` adds them; the runtime executes them (they have no Python
`execute`). Their arguments are validated against the input schemas here, so a bad call is a
tool error the model can fix, never an exception.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from app.agents.delegation import FREE_CATEGORY_RULE, Delegation
from app.agents.results import ReadMethod
from app.agents.tools import Offered
from app.models import ToolSpec

DelegationAction = Literal["delegate", "status", "result", "cancel", "wait"]
"""What a delegation tool does."""

TOOL_NAMES: dict[DelegationAction, str] = {
    "delegate": "subagent",
    "status": "subagent_status",
    "result": "subagent_result",
    "cancel": "subagent_cancel",
    "wait": "subagent_wait",
}
"""The delegation tools' names, fixed by the seed."""


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


def _positive_finite(value: float | None) -> float | None:
    if value is not None and not (value > 0 and math.isfinite(value)):
        raise ValueError("must be a positive number of seconds (omit it for no limit)")
    return value


def _wait_finite(value: float | None) -> float | None:
    if value is not None and not (value >= 0 and math.isfinite(value)):
        raise ValueError("must be zero or a positive number of seconds (omit it to wait)")
    return value


def _unique(values: list[str] | None) -> list[str] | None:
    return None if values is None else list(dict.fromkeys(values))


def _any_when_empty(values: list[str] | None) -> list[str] | None:
    # Models send [] for "any of them" as often as they omit the list.
    return _unique(values) or None


NonBlank = Annotated[str, AfterValidator(_not_blank)]
Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SubagentInput(_Strict):
    """Which subagent, its task, and how to run it."""

    category: Name = Field(description="The subagent category: one the tool description lists.")
    prompt: NonBlank = Field(
        description="The task: everything the subagent needs to know, as it sees nothing else."
    )
    load_skills: Annotated[list[Name] | None, AfterValidator(_unique)] = Field(
        None, description="Extra skills to install on the subagent, by name."
    )
    background: bool = Field(
        False,
        description="true: start it in the background and get its session id at once; "
        "false: wait for its result.",
    )
    timeout: Annotated[float | None, AfterValidator(_positive_finite)] = Field(
        None, description="Seconds the subagent may run; omit for its default."
    )


class SubagentStatusInput(_Strict):
    """Which session, or all of them."""

    session_id: Name | None = Field(
        None, description="A background session's id; omit for a table of all of yours."
    )


class SubagentResultInput(_Strict):
    """Which session, and how to read its output."""

    session_id: Name = Field(description="The background session's id.")
    read_method: ReadMethod = Field(
        "full",
        description="'full': the whole output; 'summary': the short summary the subagent gave.",
    )
    timeout: Annotated[float | None, AfterValidator(_wait_finite)] = Field(
        None,
        description="Seconds to wait for the session to end before answering with its "
        "current status; omit to wait until it ends.",
    )


class SubagentCancelInput(_Strict):
    """Which session to cancel."""

    session_id: Name = Field(description="The background session's id.")


class SubagentWaitInput(_Strict):
    """Which sessions to wait for, and for how long."""

    session_ids: Annotated[list[Name] | None, AfterValidator(_any_when_empty)] = Field(
        None,
        description="The sessions to wait for: the wait ends when one of them ends. Omit (or "
        "give []) to wait for any of your background sessions.",
    )
    timeout: Annotated[float | None, AfterValidator(_wait_finite)] = Field(
        None, description="The most seconds to wait; omit to wait until a session ends."
    )


INPUTS: dict[DelegationAction, type[BaseModel]] = {
    "delegate": SubagentInput,
    "status": SubagentStatusInput,
    "result": SubagentResultInput,
    "cancel": SubagentCancelInput,
    "wait": SubagentWaitInput,
}
"""Each delegation tool's input schema."""

_DESCRIPTIONS: dict[DelegationAction, str] = {
    "status": (
        "The status of your background subagent sessions: one session's lifecycle status "
        "(queued, with its queue position; running; succeeded; failed; timed_out; cancelled), "
        "or a table of them all when session_id is omitted."
    ),
    "result": (
        "Read a background subagent session's result once it has ended (waiting for the end "
        "if needed). read_method='summary' returns the short summary the subagent gave instead "
        "of its full output."
    ),
    "cancel": (
        "Cancel a background subagent session: a queued one never starts, a running one stops. "
        "A cancelled session sends no notice."
    ),
    "wait": (
        "Sleep until background subagent sessions end, instead of polling: those in "
        "session_ids, or any of yours when omitted. You wake with a notice naming the sessions "
        "that ended; then read them with subagent_result."
    ),
}


def delegate_description(delegation: Delegation) -> str:
    """The `subagent` tool's description: what it does, its categories, free-form or not."""
    lines = [
        "Delegate a task to a subagent: a separate agent with its own tools that works on "
        "`prompt` and returns its result. Without background it waits for the result. With "
        "background=true it answers at once with a session id: call subagent_wait to sleep "
        "until it ends (a notice tells you), then subagent_result to read it.",
        "",
        "Categories:",
    ]
    lines += [f"- {entry.category}: {entry.summary}" for entry in delegation.entries] or [
        "(none registered)"
    ]
    if delegation.free_form is not None:
        lines += [
            "",
            f"Free-form categories are allowed: any other category name starts a "
            f"general subagent of that name. {FREE_CATEGORY_RULE}.",
        ]
    else:
        lines += ["", "Only these categories are allowed."]
    if delegation.skills:
        lines += ["", "Skills load_skills may name:"]
        lines += [
            f"- {skill.name}: {skill.description or 'no description'}"
            for skill in delegation.skills
        ]
    return "\n".join(lines)


@dataclass(frozen=True, eq=False)
class DelegationTool(Offered):
    """One of the delegation tools of an agent with a `Delegation`; the runtime executes it."""

    name: str
    description: str
    input_schema: type[BaseModel]
    kind: DelegationAction
    delegation: Delegation

    @cached_property
    def spec(self) -> ToolSpec:
        """The tool as offered to a model; without free-form categories, `category` lists the
        registered ones as an enum (validation still answers an unknown one in words)."""
        schema = self.input_schema.model_json_schema()
        if self.kind == "delegate" and self.delegation.free_form is None:
            categories = list(self.delegation.categories)
            if categories:
                category: dict[str, Any] = schema["properties"]["category"]
                category["enum"] = categories
        return ToolSpec(self.name, self.description, schema)


def delegation_tools(delegation: Delegation) -> list[DelegationTool]:
    """The five delegation tools of an agent with this delegation, in a fixed order."""
    return [
        DelegationTool(
            name,
            delegate_description(delegation) if kind == "delegate" else _DESCRIPTIONS[kind],
            INPUTS[kind],
            kind,
            delegation,
        )
        for kind, name in TOOL_NAMES.items()
    ]
