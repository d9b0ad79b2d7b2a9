"""The step loop of one session: a streamed model call, then its tool calls, each step committed.

A step is one atomic write: the model's response with the results of its tool calls (assistant
message, tool messages, step count, usage, state, chunks). A response that starts sub-agents, or
waits for the client, is committed on its own first, so a run resumed after an interrupt or a
crash finds those children again by their deterministic ids instead of asking the model anew.
The loop always continues from what the store holds: a fresh start, a resume and a takeover are
the same code.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, assert_never

from pydantic import BaseModel

from app.agents import FINISH_TOOL_NAME, AgentConfig, HookContext, SubAgentTool, Tool
from app.agents.remote import RemoteSubAgentTool
from app.errors import AgentServerError, MaxStepsExceededError, RunError, StoreError
from app.ids import tool_call_id
from app.models import ModelRequest, RetryStarted, TextDelta, ToolCallReady, Usage
from app.models.base import close_stream
from app.protocol import (
    AssistantMessage,
    BaseChunk,
    ErrorChunk,
    InterruptedChunk,
    Message,
    OutputChunk,
    SubSessionRef,
    TextDeltaChunk,
    ToolCall,
    ToolPendingChunk,
    ToolStartChunk,
    UserMessage,
)
from app.runtime.calls import error_message
from app.runtime.dispatch import Called, dispatch
from app.runtime.emitter import StreamWriter
from app.runtime.hooks import fire
from app.runtime.outcome import Child, Outcome, StopReason, stopped_outcome, unanswered_calls
from app.store import MessageAppend, RefUpsert, SessionRecord, StreamUpdate, WriteBatch, now_ms

if TYPE_CHECKING:
    from app.runtime.delegation import NewChild
    from app.runtime.runtime import AgentRuntime

logger = logging.getLogger(__name__)

FINISH_REMINDER = f"Call the {FINISH_TOOL_NAME} tool with your final output to finish."
"""What an agent with an output schema is told when it answers with text alone."""


class SessionRun:
    """Runs one session (root or child) until it completes, fails, pauses or is stopped."""

    def __init__(
        self,
        runtime: AgentRuntime,
        agent: AgentConfig,
        record: SessionRecord,
        messages: list[Message],
        writer: StreamWriter,
        *,
        parent: SessionRun | None = None,
        ref: SubSessionRef | None = None,
        approved: frozenset[str] = frozenset(),
    ) -> None:
        self.runtime = runtime
        self.agent = agent
        self.record = record
        self.messages = messages
        self.writer = writer
        self.parent = parent
        self.ref = ref
        """This session's ref in its parent, kept in step with the session's status."""
        self.state: BaseModel | dict[str, Any] = agent.load_state(record.state)
        self.children: dict[str, Child] = {}
        """Running children, which a stop of this session reaches."""
        self.opened: dict[str, NewChild] = {}
        """Children stored with the response that starts them, not yet running."""
        self.child_tasks: set[asyncio.Task[Outcome]] = set()
        """Every child's task (looking it up, opening it, running it) until it ends."""
        self.approved = approved
        """Calls needing approval that the client approved when it resumed this session."""
        self.stop_reason: StopReason | None = None
        self.stop_message: str | None = None
        self.child_stop: tuple[StopReason, str | None] | None = None
        """The stop every child gets, including one still being opened: set when this session
        stops, or suspends for the client while children run."""
        self.task: asyncio.Task[Any] | None = None
        self._step = record.step_count
        """The step in progress: one past the committed count while a model call streams."""
        self._turn = sum(1 for message in messages if isinstance(message, AssistantMessage))
        self._held: AssistantMessage | None = None
        """A response whose tools run before it is committed: it is committed with their
        results, or dropped with the step if the run stops first."""
        """How many model responses the conversation holds (numbers tool calls without ids)."""
        self._usage = Usage(record.input_tokens, record.output_tokens)
        self._started = False
        self._committing = False
        self._stop_deferred = False
        self._ending = False
        self._fresh_calls = False
        """Whether the pending calls came from a model call of this run (so no child exists)."""
        runtime.active[record.session_id] = self

    @property
    def session_id(self) -> str:
        """The session's id."""
        return self.record.session_id

    @property
    def ending(self) -> bool:
        """Whether the session is committing its end (after which it holds no lease)."""
        return self._ending

    @property
    def step(self) -> int:
        """The current step (1-based)."""
        return self._step

    # -- control -------------------------------------------------------------------------------

    def stop(self, reason: StopReason, message: str | None = None) -> None:
        """Stop this session and its running children (idempotent; the first reason wins)."""
        if self.stop_reason is not None or self._ending:
            return
        self.stop_reason = reason
        self.stop_message = message
        self._stop_children(reason, message)
        # A run that has not started yet sees `stop_reason` when it does; one in the middle of a
        # commit stops once the commit has landed and its in-memory state matches the store.
        if self._committing:
            self._stop_deferred = True
        elif self._started and self.task is not None and not self.task.done():
            self.task.cancel()

    def _stop_children(self, reason: StopReason, message: str | None) -> None:
        self.child_stop = self.child_stop or (reason, message)
        for child in list(self.children.values()):
            child.stop(reason, message)

    def emit(self, chunk_type: type[BaseChunk], **fields: Any) -> None:
        """Emit a chunk from this session into its root's stream."""
        self.writer.emit(chunk_type, self.record.session_id, self.agent.name, self._step, fields)

    def hook_context(self) -> HookContext:
        """Who this session is, for hooks."""
        return HookContext(
            self.record.session_id, self.agent.name, self.record.parent_session_id, self.step
        )

    # -- the run -------------------------------------------------------------------------------

    async def run(self) -> Outcome:
        """Run to an outcome and commit it. A store failure propagates (the run is left to be
        taken over, as after a crash); so does a stop for shutdown."""
        task = asyncio.current_task()
        assert task is not None
        self.task = task
        self._started = True
        hooks = self.agent.hooks
        try:
            if hooks.on_agent_start is not None:
                await fire(hooks.on_agent_start, self.hook_context())
            try:
                if self.stop_reason is not None:
                    raise asyncio.CancelledError
                outcome = await self._loop()
            except asyncio.CancelledError:
                if self.stop_reason in (None, "shutdown"):
                    raise
                task.uncancel()
                outcome = await self._stopped()
            except StoreError:
                raise
            except AgentServerError as exc:
                outcome = await self._end(Outcome("failed", error=exc.message))
            except Exception as exc:
                logger.exception("Session %s failed", self.session_id)
                outcome = await self._end(Outcome("failed", error=error_message(exc)))
        finally:
            self.runtime.active.pop(self.session_id, None)
        if outcome.status == "completed" and hooks.on_agent_complete is not None:
            await fire(hooks.on_agent_complete, self.hook_context(), outcome.output)
        elif outcome.status == "failed" and hooks.on_agent_fail is not None:
            await fire(hooks.on_agent_fail, self.hook_context(), outcome.error)
        return outcome

    async def _loop(self) -> Outcome:
        while True:
            pending = self._unanswered_calls()
            outcome = await (self._tools_phase(pending) if pending else self._model_phase())
            if outcome is not None:
                return outcome

    def _unanswered_calls(self) -> list[ToolCall]:
        if self._held is not None:
            return list(self._held.tool_calls)
        return unanswered_calls(self.messages)

    # -- model phase ---------------------------------------------------------------------------

    async def _model_phase(self) -> Outcome | None:
        if self.record.step_count >= self.agent.max_steps:
            raise MaxStepsExceededError()
        model = self.agent.model
        if model is None:
            raise RunError(f"Agent {self.agent.name!r} has no model")
        self._step = self.record.step_count + 1
        request = ModelRequest(
            session_id=self.session_id,
            agent_type=self.agent.name,
            system_prompt=self.agent.system_prompt,
            messages=tuple(self.messages),
            tools=self.agent.tool_specs,
            step=self.step,
        )
        text: list[str] = []
        calls: list[ToolCall] = []
        usage = None
        events = model.stream(request)
        try:
            async for event in events:
                if isinstance(event, TextDelta):
                    if event.text:
                        text.append(event.text)
                        self.emit(TextDeltaChunk, delta=event.text)
                elif isinstance(event, ToolCallReady):
                    calls.append(event.call)
                elif isinstance(event, Usage):
                    usage = event
                elif isinstance(event, RetryStarted):
                    text, calls, usage = [], [], None
                    self.writer.retract_text(self.session_id, self._step)
                else:
                    assert_never(event)
        finally:
            # A failure here closes the model's stream (its HTTP response) at once.
            await close_stream(events)
        calls = [
            call
            if call.id
            else ToolCall.trusted(
                {
                    "name": call.name,
                    "arguments": call.arguments,
                    "id": tool_call_id(self._turn, index),
                }
            )
            for index, call in enumerate(calls)
        ]
        assistant = AssistantMessage.trusted({"content": "".join(text), "tool_calls": tuple(calls)})
        if usage is not None:
            self._usage = Usage(
                self._usage.input_tokens + usage.input_tokens,
                self._usage.output_tokens + usage.output_tokens,
            )
        if calls:
            self._fresh_calls = True
            if any(self._commits_first(call) for call in calls):
                from app.runtime.delegation import open_children

                # The children this response starts are stored with it, in one write. Local
                # children need not wait for it to land: their own writes follow it in the
                # stream's order. A remote server or the client must not hear of a call that a
                # crash could still take back.
                self.opened = open_children(self, calls)
                extra = WriteBatch()
                for child in self.opened.values():
                    child.add_to(extra)
                told_outside = any(
                    isinstance(self.agent.tool_map.get(call.name), RemoteSubAgentTool)
                    or self._waits_for(call) is not None
                    for call in calls
                )
                await self._commit([assistant], extra=extra, wait=told_outside)
            else:
                self._held = assistant
            return None
        if self.agent.output_schema is None:
            return await self._end(Outcome("completed", output=assistant.content), [assistant])
        await self._commit([assistant, UserMessage(content=FINISH_REMINDER)])
        return None

    # -- tools phase ---------------------------------------------------------------------------

    async def _tools_phase(self, calls: Sequence[ToolCall]) -> Outcome | None:
        fresh, self._fresh_calls = self._fresh_calls, False
        for call in calls:
            if call.name != FINISH_TOOL_NAME:
                self.emit_tool_start(call)
        waiting = [call for call in calls if self._waits_for(call) is not None]
        if waiting:
            results = await self._suspending(calls, waiting, fresh)
        elif len(calls) == 1:
            results = [await dispatch(self, calls[0], fresh)]
        else:
            results = await asyncio.gather(*(dispatch(self, call, fresh) for call in calls))
        answered = [result.message for result in results if result.message is not None]
        if len(answered) < len(results):
            return await self._end(Outcome("paused_awaiting_client"), answered)
        finish = next((result.finish for result in results if result.finish), None)
        if finish is not None:
            return await self._end(finish, answered)
        await self._commit(answered)
        return None

    async def _suspending(
        self, calls: Sequence[ToolCall], waiting: Sequence[ToolCall], fresh: bool
    ) -> list[Called]:
        """Run a step in which some calls wait for the client: the session suspends once the
        step's own tools have finished. Sub-agents done by then count; those still running are
        dropped, to start again when the session resumes (seed 002's cascade)."""
        for call in waiting:
            self.emit(
                ToolPendingChunk,
                tool_call_id=call.id,
                tool_name=call.name,
                arguments=call.arguments,
                reason=self._waits_for(call),
            )
        others = [call for call in calls if call not in waiting]
        tasks = [asyncio.ensure_future(dispatch(self, call, fresh)) for call in others]
        tools = [
            task
            for task, call in zip(tasks, others, strict=True)
            if not isinstance(self.agent.tool_map.get(call.name), SubAgentTool)
        ]
        try:
            if tools:
                await asyncio.wait(tools)
            self._stop_children("parent_suspended", "The parent session suspended")
            done = await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            raise
        results = dict(zip((call.id for call in others), done, strict=True))
        return [results.get(call.id, Called(None)) for call in calls]

    def emit_tool_start(self, call: ToolCall) -> None:
        """Announce a tool call in the stream."""
        self.emit(
            ToolStartChunk, tool_call_id=call.id, tool_name=call.name, arguments=call.arguments
        )

    def _commits_first(self, call: ToolCall) -> bool:
        """Whether the response must be committed before this call runs: it starts a child
        (found again by id after a crash) or waits for the client."""
        tool = self.agent.tool_map.get(call.name)
        return isinstance(tool, SubAgentTool | RemoteSubAgentTool) or (
            self._waits_for(call) is not None
        )

    def _waits_for(self, call: ToolCall) -> Literal["client", "approval"] | None:
        """Whether the call waits for the client's result or approval."""
        tool = self.agent.tool_map.get(call.name)
        if not isinstance(tool, Tool):
            return None
        if tool.is_client_tool:
            return "client"
        if tool.requires_approval and call.id not in self.approved:
            return "approval"
        return None

    # -- commits -------------------------------------------------------------------------------

    def _dump_state(self) -> dict[str, Any]:
        if isinstance(self.state, BaseModel):
            return self.state.model_dump(mode="json")
        return dict(self.state)

    def _with_held(self, messages: Sequence[Message]) -> Sequence[Message]:
        if self._held is None:
            return messages
        held, self._held = self._held, None
        return [held, *messages]

    def _appends(self, messages: Sequence[Message]) -> list[MessageAppend]:
        start = len(self.messages)
        return [
            MessageAppend(self.session_id, start + offset, message)
            for offset, message in enumerate(messages)
        ]

    def _next_record(self, step_count: int, **changes: Any) -> SessionRecord:
        return self.record.evolve(
            step_count=step_count,
            state=self._dump_state(),
            input_tokens=self._usage.input_tokens,
            output_tokens=self._usage.output_tokens,
            updated_at=now_ms(),
            **changes,
        )

    async def _commit(
        self, messages: Sequence[Message], *, extra: WriteBatch | None = None, wait: bool = True
    ) -> None:
        """Commit the step. With `wait`, return once it has landed (the next step starts on a
        durable one); without, once the store has taken it: the stream's later writes land after
        it, and none that builds on it lands if it fails (the rules refuse them, or the store
        fails them with it when the database did)."""
        messages = self._with_held(messages)
        record = self._next_record(self._step)
        batch = extra or WriteBatch()
        batch.updated_sessions.append(record)
        batch.messages.extend(self._appends(messages))
        landed = self.writer.submit(batch, hold=not wait)
        if wait:
            self._committing = True
            try:
                await landed
            finally:
                self._committing = False
        self.record = record
        self.messages.extend(messages)
        self._turn += sum(1 for message in messages if isinstance(message, AssistantMessage))
        if self._stop_deferred:
            raise asyncio.CancelledError

    async def _end(self, outcome: Outcome, messages: Sequence[Message] = ()) -> Outcome:
        """Commit the session's end: status, output or error, its chunk, and its parent's ref."""
        self._ending = True
        messages = self._with_held(messages)
        now = now_ms()
        # A step whose model call was cut short by a stop is not a step: it will be made again.
        stopped = self.stop_reason is not None
        record = self._next_record(
            self.record.step_count if stopped else self._step,
            status=outcome.status,
            output=outcome.output,
            error=outcome.error,
            failure_reason=outcome.failure_reason,
        )
        if outcome.status == "completed":
            self.emit(OutputChunk, output=outcome.output)
        elif outcome.status == "failed":
            self.emit(ErrorChunk, error=outcome.error or "failed")
        elif outcome.status == "interrupted":
            self.emit(InterruptedChunk, reason=outcome.error)
        batch = WriteBatch(updated_sessions=[record], messages=self._appends(messages))
        self._close_unstarted(batch, now)
        if self.ref is not None and self.parent is not None:
            self.ref = self.ref.replaced({"status": outcome.status, "completed_at": now})
            batch.refs.append(RefUpsert(self.parent.session_id, self.ref))
        if self.record.is_root:
            batch.streams.append(StreamUpdate(self.record.stream_id, outcome.status))
        # A child's parent goes on once the end is taken: its own next commit follows it (and
        # may carry it: the store may hold it for that). A root's end is what its caller waits
        # for, so it must have landed.
        landed = self.writer.submit(batch, hold=not self.record.is_root)
        if self.record.is_root:
            await landed
        self.record = record
        self.messages.extend(messages)
        return outcome

    def _close_unstarted(self, batch: WriteBatch, now: int) -> None:
        """Record the stop of children stored with a response whose calls never ran."""
        if not self.opened:
            return
        outcome = stopped_outcome(*(self.child_stop or ("interrupted", None)))
        for child in self.opened.values():
            batch.updated_sessions.append(
                child.record.evolve(
                    status=outcome.status,
                    error=outcome.error,
                    failure_reason=outcome.failure_reason,
                    updated_at=now,
                )
            )
            batch.refs.append(
                RefUpsert(
                    self.session_id,
                    child.ref.replaced({"status": outcome.status, "completed_at": now}),
                )
            )
        self.opened = {}

    async def _stopped(self) -> Outcome:
        """End a run stopped from outside, once its children have recorded their own stop."""
        if self.child_tasks:
            await asyncio.gather(*self.child_tasks, return_exceptions=True)
        assert self.stop_reason is not None
        outcome = stopped_outcome(self.stop_reason, self.stop_message)
        self._held = None  # the step in progress is dropped, as a crash would drop it
        return await self._end(outcome)
