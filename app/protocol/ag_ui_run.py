"""The AG-UI events (protocol 1.0) that frame a run: how it opens, with the tree's state
(`RUN_STARTED`, `STATE_SNAPSHOT`), and how it ends (`RUN_FINISHED` with its outcome, or
`RUN_ERROR`). Apart from the events made from chunks, which `app.protocol.ag_ui_events` joins
with these in one union; TypedDicts for the reasons given there.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from pydantic import ConfigDict, Field, WithJsonSchema, with_config
from typing_extensions import TypedDict  # pydantic reads typing's only from Python 3.12

_CONFIG = ConfigDict(extra="forbid", use_attribute_docstrings=True)

NotNull = Annotated[Any, WithJsonSchema({"not": {"type": "null"}})]
"""Any JSON value but null (AG-UI leaves such a field out rather than null)."""


AgentStatus = Literal["running", "completed", "failed"]
"""An agent's status in the tree's state."""


@with_config(_CONFIG)
class AgentEntry(TypedDict):
    """One agent of the tree, in the state."""

    agentType: str
    """Its agent type."""
    parentId: str | None
    """The session that called it (null for the root)."""
    status: AgentStatus
    """Its status, as the stream tells it."""


@with_config(_CONFIG)
class TreeState(TypedDict):
    """The state: the tree of agents."""

    agents: dict[str, AgentEntry]
    """Every agent of the tree, by session id."""


@with_config(_CONFIG)
class PatchOperation(TypedDict):
    """A JSON Patch operation (RFC 6902) on the tree's state."""

    op: Literal["add", "replace"]
    """`add` when an agent starts, `replace` when it ends."""
    path: str
    """`/agents/<sessionId>`."""
    value: AgentEntry
    """The agent."""


@with_config(_CONFIG)
class RunStarted(TypedDict):
    """Opens the run (one per connection)."""

    type: Literal["RUN_STARTED"]
    """`RUN_STARTED`."""
    threadId: str
    """The thread: the session's id."""
    runId: str
    """The run's id: the client's, or `<streamId>-<sequence it starts after>`."""


@with_config(_CONFIG)
class StateSnapshot(TypedDict):
    """The tree's state at the start of the connection."""

    type: Literal["STATE_SNAPSHOT"]
    """`STATE_SNAPSHOT`."""
    snapshot: TreeState
    """The state."""


@with_config(_CONFIG)
class Interrupt(TypedDict):
    """A call the run waits for the client to answer."""

    id: str
    """The interrupt's id: the call's id (answer with a `resume` entry of this `interruptId`)."""
    reason: Literal["approval", "client_tool"]
    """An approval, or a client tool's result."""
    toolCallId: str
    """The call's id."""
    message: str
    """What waits."""
    subagentRunId: NotRequired[
        Annotated[str, Field(description="The sub-agent whose call it is; absent for the root.")]
    ]


@with_config(_CONFIG)
class SuccessOutcome(TypedDict):
    """The run completed."""

    type: Literal["success"]
    """`success`."""


@with_config(_CONFIG)
class InterruptOutcome(TypedDict):
    """The run is paused for the client: the next run answers these with `resume` entries."""

    type: Literal["interrupt"]
    """`interrupt`."""
    interrupts: list[Interrupt]
    """The calls it waits for."""


@with_config(_CONFIG)
class CancelledOutcome(TypedDict):
    """The run was interrupted or terminated."""

    type: Literal["cancelled"]
    """`cancelled`."""


RunOutcome = Annotated[
    SuccessOutcome | InterruptOutcome | CancelledOutcome, Field(discriminator="type")
]
"""Why a run ended."""


@with_config(_CONFIG)
class RunFinished(TypedDict):
    """The run stopped, and did not fail."""

    type: Literal["RUN_FINISHED"]
    """`RUN_FINISHED`."""
    threadId: str
    """The thread: the session's id."""
    runId: str
    """The run's id."""
    outcome: RunOutcome
    """How it ended."""
    result: NotRequired[
        Annotated[NotNull, Field(description="The root agent's output, on success, if any.")]
    ]


@with_config(_CONFIG)
class RunError(TypedDict):
    """The run failed."""

    type: Literal["RUN_ERROR"]
    """`RUN_ERROR`."""
    message: str
    """What went wrong."""
