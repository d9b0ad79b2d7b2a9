"""What one tool call of a step does: finish the agent, run a function tool, delegate to a child
(through `Children`, by the kind of child the tool makes), or answer an unknown tool; its result
as the tool message the model reads."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from app import observability
from app.agents import (
    FINISH_TOOL_NAME,
    AgentConfig,
    CompanionTool,
    DelegationTool,
    RemoteSubAgentTool,
    SubAgentTool,
    Tool,
    ToolContext,
    denied,
)
from app.protocol import ToolCall, ToolEndChunk, ToolMessage, ToolPendingChunk
from app.runtime.calls import CallResult, execute_tool, parse_arguments, to_json
from app.runtime.child_kinds import Delegation
from app.runtime.children import Unanswered
from app.runtime.companions import companion_call
from app.runtime.local import LocalDelegation
from app.runtime.outcome import SUSPENDED, Outcome
from app.runtime.persistent import Owner
from app.runtime.remote import RemoteDelegation
from app.runtime.task_control import control_call
from app.runtime.tasks import TaskDelegation, delegate

KINDS: dict[type[Any], Callable[[Any], Delegation]] = {
    SubAgentTool: LocalDelegation,
    RemoteSubAgentTool: RemoteDelegation,
    DelegationTool: TaskDelegation,
}
"""Each tool that makes a child, with the kind of child it makes."""


@functools.cache
def delegations(agent: AgentConfig) -> dict[str, Delegation]:
    """The agent's tools that make children, by tool name, as the kinds of child they make
    (of the delegation tools, `subagent`: the others control its background children)."""
    return {
        name: KINDS[type(tool)](tool)
        for name, tool in agent.tool_map.items()
        if type(tool) in KINDS
        and not (isinstance(tool, DelegationTool) and tool.kind != "delegate")
    }


class Caller(Owner, Protocol):
    """What a tool call needs of the session that makes it."""

    @property
    def state(self) -> Any: ...

    @property
    def stopping(self) -> object | None: ...

    def announce(self, call: ToolCall) -> None:
        """Emit the call's `tool_start`."""

    def waits_for(self, call: ToolCall) -> Literal["client", "approval"] | None:
        """Whether the call waits for the client's result or approval."""


@functools.cache
def children_like(agent: AgentConfig) -> frozenset[str]:
    """The agent's tools whose calls a suspension drops rather than waits for: those that make
    children, and the companion calls that wait for one."""
    waiting = {"spawn", "send", "wait"}
    companions = {
        name
        for name, tool in agent.tool_map.items()
        if isinstance(tool, CompanionTool) and tool.action in waiting
    }
    return frozenset(delegations(agent)) | companions


async def answer_calls(run: Caller, calls: Sequence[ToolCall], *, new: bool) -> list[Called]:
    """Make the calls of a step, at once, and give their results in call order. When some wait
    for the client, the step suspends once its own tools have finished: children done by then
    count, those still running are dropped (they start again when the session resumes: the
    cascade), and the waiting calls stay unanswered. A failed write cancels the step's other
    calls."""
    waiting = {call.id: reason for call in calls if (reason := run.waits_for(call)) is not None}
    if not waiting:
        if len(calls) == 1:
            return [await dispatch(run, calls[0], new)]
        return await _all(run, calls, new, suspend=False)
    for call in calls:
        if call.id in waiting:
            run.emit(
                ToolPendingChunk,
                tool_call_id=call.id,
                tool_name=call.name,
                arguments=call.arguments,
                reason=waiting[call.id],
            )
    others = [call for call in calls if call.id not in waiting]
    done = await _all(run, others, new, suspend=True)
    results = dict(zip((call.id for call in others), done, strict=True))
    return [results.get(call.id, WAITS) for call in calls]


async def _all(run: Caller, calls: Sequence[ToolCall], new: bool, *, suspend: bool) -> list[Called]:
    """Make `calls` at once. The session suspends (`suspend`: some call waits for the client;
    or once a child pauses for the client) when the step's function tools have finished: the
    children still running then are stopped, to run again on resume."""
    tasks = [asyncio.ensure_future(dispatch(run, call, new)) for call in calls]
    children = children_like(run.agent)
    gathered = asyncio.gather(*tasks)
    try:
        if not suspend and any(call.name in children for call in calls):
            paused = run.children.on_pause()
            racing: list[asyncio.Future[Any]] = [gathered, paused]
            await asyncio.wait(racing, return_when=asyncio.FIRST_COMPLETED)
            paused.cancel()
            suspend = not gathered.done()
        if suspend:
            tools = [t for t, call in zip(tasks, calls, strict=True) if call.name not in children]
            if tools:
                await asyncio.wait(tools)
            run.children.stop(SUSPENDED)
        return await gathered
    except BaseException:
        for task in tasks:
            task.cancel()
        # The step's failure is what propagates: what the cancelled calls end with is not news.
        gathered.add_done_callback(_retrieved)
        raise


def _retrieved(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


@dataclass(frozen=True, slots=True)
class Called:
    """One tool call's result, or none when the call stays unanswered (and why)."""

    message: ToolMessage | None
    finish: Outcome | None = None
    dropped: str | None = None
    """For a call a suspension dropped, what its `tool_end` says (it runs again on resume)."""


WAITS = Called(None)
"""A call that waits for the client, itself or through a child."""


async def dispatch(run: Caller, call: ToolCall, new: bool) -> Called:
    """Run one call of a step and give its result as a tool message; no message for a child
    dropped because the session suspends, and the outcome for a valid `__finish__`."""
    assert call.id is not None
    agent = run.agent
    tool = agent.tool_map.get(call.name)
    delegation = delegations(agent).get(call.name)
    if call.name == FINISH_TOOL_NAME and agent.output_schema is not None:
        # A valid finish shows in the stream as the `output` chunk; a rejected one as a tool
        # call that failed, so the model's mistake is visible.
        parsed = parse_arguments(call.name, agent.output_schema, call.arguments)
        if isinstance(parsed, CallResult):
            run.announce(call)
            result = CallResult(error=f"{parsed.error}. Fix the output and call it again.")
        else:
            output = to_json(parsed.model_dump(mode="json"))
            message = ToolMessage.trusted(
                {"tool_call_id": call.id, "tool_name": call.name, "result": output}
            )
            return Called(message, Outcome("completed", output=output))
    elif tool is None:
        offered = ", ".join(spec.name for spec in agent.tool_specs) or "none"
        result = CallResult(error=f"Unknown tool {call.name!r}; available tools: {offered}")
    elif (refusal := denied(agent, call.name)) is not None:
        result = CallResult(error=refusal)
    elif isinstance(tool, DelegationTool) and tool.kind != "delegate":
        result = await control_call(run, tool, call.arguments)
    elif isinstance(tool, DelegationTool) and (
        refused := await delegate(run, call.id, call.arguments, new)
    ):
        result = refused  # refused, or started in the background
    elif delegation is not None:
        delegated = await run.children.call(delegation, call, new)
        if isinstance(delegated, Unanswered):
            return Called(None, dropped=delegated.dropped)
        result = delegated
    elif isinstance(tool, CompanionTool):
        answered = await companion_call(run, tool, call.id, call.arguments)
        if isinstance(answered, Unanswered):
            return Called(None, dropped=answered.dropped)
        result = answered
    elif isinstance(tool, Tool):
        result = await _execute(run, tool, call)
    else:
        raise AssertionError(f"No kind of child for {tool!r}")
    run.emit(
        ToolEndChunk,
        tool_call_id=call.id,
        tool_name=call.name,
        result=result.result,
        error=result.error,
    )
    message = ToolMessage.trusted(
        {
            "tool_call_id": call.id,
            "tool_name": call.name,
            "result": result.result,
            "error": result.error,
        }
    )
    return Called(message)


async def _execute(run: Caller, tool: Tool, call: ToolCall) -> CallResult:
    parsed = parse_arguments(call.name, tool.input_schema, call.arguments)
    if isinstance(parsed, CallResult):
        return parsed
    assert call.id is not None
    run.tree.check_lease()
    ctx = ToolContext(
        session_id=run.session_id,
        agent_type=run.agent.name,
        tool_call_id=call.id,
        step=run.step,
        state=run.state,
        _is_interrupted=lambda: run.stopping is not None,
    )
    return await observability.tool_call(tool.name, execute_tool(tool, parsed, ctx))
