"""What one tool call of a step does: finish the agent, run a function tool, delegate to a local
or remote sub-agent, or answer an unknown tool; its result as the tool message the model reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, assert_never

from app.agents import FINISH_TOOL_NAME, SubAgentTool, Tool, ToolContext
from app.agents.remote import RemoteSubAgentTool
from app.protocol import ToolCall, ToolEndChunk, ToolMessage
from app.runtime.calls import CallResult, execute_tool, parse_arguments, to_json
from app.runtime.outcome import Outcome

if TYPE_CHECKING:
    from app.runtime.session import SessionRun


@dataclass(frozen=True, slots=True)
class Called:
    """One tool call's result, or none when the call stays unanswered."""

    message: ToolMessage | None
    finish: Outcome | None = None


async def dispatch(run: SessionRun, call: ToolCall, fresh: bool) -> Called:
    """Run one call of a step and give its result as a tool message; no message for a child
    dropped because the session suspends, and the outcome for a valid `__finish__`."""
    assert call.id is not None
    tool = run.agent.tool_map.get(call.name)
    if call.name == FINISH_TOOL_NAME and run.agent.output_schema is not None:
        # A valid finish shows in the stream as the `output` chunk; a rejected one as a tool
        # call that failed, so the model's mistake is visible.
        parsed = parse_arguments(call.name, run.agent.output_schema, call.arguments)
        if isinstance(parsed, CallResult):
            run.emit_tool_start(call)
            result = CallResult(error=f"{parsed.error}. Fix the output and call it again.")
        else:
            output = to_json(parsed.model_dump(mode="json"))
            message = ToolMessage.trusted(
                {"tool_call_id": call.id, "tool_name": call.name, "result": output}
            )
            return Called(message, Outcome("completed", output=output))
    elif tool is None:
        offered = ", ".join(spec.name for spec in run.agent.tool_specs) or "none"
        result = CallResult(error=f"Unknown tool {call.name!r}; available tools: {offered}")
    elif isinstance(tool, SubAgentTool):
        from app.runtime.delegation import run_sub_agent

        delegated = await run_sub_agent(run, tool, call, fresh)
        if delegated is None:
            return Called(None)
        result = delegated
    elif isinstance(tool, RemoteSubAgentTool):
        from app.runtime.remote import run_remote_sub_agent

        delegated = await run_remote_sub_agent(run, tool, call, fresh)
        if delegated is None:
            return Called(None)
        result = delegated
    elif isinstance(tool, Tool):
        result = await _execute(run, tool, call)
    else:
        assert_never(tool)
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


async def _execute(run: SessionRun, tool: Tool, call: ToolCall) -> CallResult:
    parsed = parse_arguments(call.name, tool.input_schema, call.arguments)
    if isinstance(parsed, CallResult):
        return parsed
    assert call.id is not None
    ctx = ToolContext(
        session_id=run.session_id,
        agent_type=run.agent.name,
        tool_call_id=call.id,
        step=run.step,
        state=run.state,
        _is_interrupted=lambda: run.stop_reason is not None,
    )
    return await execute_tool(tool, parsed, ctx)
