"""The step loop of one session: a streamed model call, then its tool calls, each step committed.

A step is one atomic write: the model's response with the results of its tool calls (assistant
message, tool messages, step count, usage, state, chunks). A response that starts children, or
waits for the client, is committed on its own first, so a run resumed after an interrupt or a
crash finds those children again by their deterministic ids instead of asking the model anew.
The loop always continues from what the store holds: a fresh start, a resume and a takeover are
the same code. See docs/architecture.md, "The life of a step".
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Sequence
from typing import Any, Literal

from app import observability
from app.agents import FINISH_TOOL_NAME, AgentConfig, HookContext, Tool
from app.errors import (
    AgentServerError,
    ConflictError,
    MaxStepsExceededError,
    NotFoundError,
    RunError,
    StoreError,
)
from app.models import ModelRequest, Usage
from app.protocol import (
    AssistantMessage,
    BaseChunk,
    ErrorChunk,
    InterruptedChunk,
    Message,
    OutputChunk,
    StepRedoChunk,
    SubSessionRef,
    TextDeltaChunk,
    ToolCall,
    ToolEndChunk,
    ToolStartChunk,
    UserMessage,
)
from app.protocol.values import clean_text
from app.runtime.calls import error_message
from app.runtime.children import Children, Frame
from app.runtime.dispatch import answer_calls, children_like, delegations
from app.runtime.hooks import fire
from app.runtime.model_call import call_model
from app.runtime.news import News, inbox, notices
from app.runtime.outcome import Outcome, Stop, stopped_outcome, unanswered_calls
from app.runtime.session_state import (
    NOTHING,
    RESUMED_NOTHING,
    Pending,
    Phase,
    Resumed,
    SessionTree,
)
from app.runtime.steps import (
    added_usage,
    appended,
    dump_state,
    ended_ref,
    responses_and_call_ids,
    stepped,
)
from app.runtime.stream_calls import StreamCalls
from app.runtime.tasks import Lane
from app.store import RefUpsert, SessionRecord, WriteBatch, now_ms

logger = logging.getLogger(__name__)

FINISH_REMINDER = f"Call the {FINISH_TOOL_NAME} tool with your final output to finish."
"""What an agent with an output schema is told when it answers with text alone."""


class SessionRun:
    """Runs one session (root or child) until it completes, fails, pauses or is stopped."""

    def __init__(
        self,
        tree: SessionTree,
        agent: AgentConfig,
        record: SessionRecord,
        messages: list[Message],
        *,
        ref: SubSessionRef | None = None,
        resumed: Resumed | None = None,
    ) -> None:
        self.tree = tree
        self.agent = agent
        self.record = record
        self.messages = messages
        self.ref = ref
        """This session's ref in its parent, kept in step with the session's status."""
        self.state = agent.load_state(record.state)
        self.children = Children(self)
        self.resumed = resumed or RESUMED_NOTHING
        self.phase = Phase.READY
        self.stopping: Stop | None = None
        self.task: asyncio.Task[Any] | None = None
        self._step = record.step_count
        """The step in progress: one past the committed count while a model call streams."""
        self._responses, self._call_ids = responses_and_call_ids(messages)
        """How many model responses the conversation holds, and the call ids they used: a new
        response's ids must differ from them (those without one are numbered by response)."""
        self._usage = Usage(record.input_tokens, record.output_tokens)
        self._kinds = delegations(agent)
        """The agent's tools that make children, by name."""
        self._companions = children_like(agent) - self._kinds.keys()
        """The agent's companion tools that start or wait for a persistent child."""
        self.inbox_due = False
        """Whether messages may be queued for this session (a persistent child told something
        while it runs, or reopened): it reads them before its next model call, or before it
        completes."""
        self._hears_of_children = agent.delegation is not None or any(
            entry.mode == "non-blocking" for entry in agent.persistent_agents
        )
        """Whether the session has children whose ends reach it in notices (non-blocking
        persistent ones, background `subagent` sessions)."""
        self.frame: Frame | None = None
        """For a child that runs on its own (a persistent child in the background): the frame
        its end closes in the stream."""
        self.lane: Lane | None = None
        """For a background `subagent` session: its place in the queue (`tasks.Lane`)."""
        self.calls = StreamCalls(tree.writer, record.session_id, agent.name)
        """Its calls in the stream: each `tool_start` is ended, whatever ends the session."""

    @property
    def session_id(self) -> str:
        """The session's id."""
        return self.record.session_id

    @property
    def step(self) -> int:
        """The current step (1-based)."""
        return self._step

    @property
    def ending(self) -> bool:
        """Whether it is past reading anything more (writing its end, or ended)."""
        return self.phase in (Phase.ENDING, Phase.ENDED)

    # -- control -------------------------------------------------------------------------------

    def stop(self, stop: Stop) -> None:
        """Stop this session and its running children (idempotent; the first stop wins)."""
        if self.stopping is not None or self.phase in (Phase.ENDING, Phase.ENDED):
            return
        self.stopping = stop
        self.children.stop(stop)
        if self.phase is Phase.WORKING and self.task is not None and not self.task.done():
            self.task.cancel()

    def emit(self, chunk_type: type[BaseChunk], **fields: Any) -> None:
        """Emit a chunk from this session into its root's stream."""
        self.tree.writer.emit(
            chunk_type, self.record.session_id, self.agent.name, self._step, fields
        )
        self.calls.seen(chunk_type, fields, self._step)

    def announce(self, call: ToolCall) -> None:
        """Announce a tool call in the stream."""
        self.emit(
            ToolStartChunk, tool_call_id=call.id, tool_name=call.name, arguments=call.arguments
        )

    def hook_context(self) -> HookContext:
        """Who this session is, for hooks."""
        return HookContext(
            self.record.session_id, self.agent.name, self.record.parent_session_id, self.step
        )

    def child_run(
        self,
        agent: AgentConfig,
        record: SessionRecord,
        messages: list[Message],
        ref: SubSessionRef,
    ) -> SessionRun:
        """The run of a local child of this session, in the same tree."""
        return self.tree.new_run(agent, record, messages, ref=ref)

    # -- the run -------------------------------------------------------------------------------

    @observability.observe_run
    async def run(self) -> Outcome:
        """Run to an outcome and commit it. A failed write propagates (the tree decides: the
        run is left to be taken over as after a crash, or the tree fails when the store refused
        the write); so does a stop for shutdown."""
        task = asyncio.current_task()
        assert task is not None
        self.task = task
        left = self.tree.take_stale(self.session_id)
        if left is not None:
            self.calls.take_up(left, self._call_ids)
        hooks = self.agent.hooks
        try:
            if hooks.on_agent_start is not None:
                await fire(hooks.on_agent_start, self.hook_context())
            try:
                if self.stopping is not None:
                    raise asyncio.CancelledError
                self.phase = Phase.WORKING
                outcome = await self._loop()
            except asyncio.CancelledError:
                if self.stopping is None or self.stopping.reason == "shutdown":
                    raise
                task.uncancel()
                outcome = await self._stopped()
            except (StoreError, ConflictError, NotFoundError):
                raise  # a write failed (the rules or the database refused it, or it was lost)
            except AgentServerError as exc:
                outcome = await self._end(Outcome("failed", error=exc.message))
            except Exception as exc:
                logger.exception("Session %s failed", self.session_id)
                outcome = await self._end(Outcome("failed", error=error_message(exc)))
        finally:
            self.phase = Phase.ENDED
            self.tree.ended(self)
        if outcome.status == "completed" and hooks.on_agent_complete is not None:
            await fire(hooks.on_agent_complete, self.hook_context(), outcome.output)
        elif (
            outcome.status == "failed"
            and outcome.failure_reason != "parent_suspended"
            and hooks.on_agent_fail is not None
        ):
            await fire(hooks.on_agent_fail, self.hook_context(), outcome.error)
        return outcome

    async def _loop(self) -> Outcome:
        if self.lane is not None:
            await self.lane.begin(self)
        self.calls.end_answered(self.messages)
        pending = Pending(unanswered_calls(self.messages))
        while True:
            if pending.calls:
                outcome = await self._tools(pending)
                if outcome is not None:
                    return outcome
                pending = NOTHING
                continue
            step = await self._model()
            if isinstance(step, Outcome):
                return step
            pending = step

    # -- model phase ---------------------------------------------------------------------------

    async def _model(self) -> Pending | Outcome:
        """One model call: the calls it asks for, or the session's end."""
        if self.record.step_count >= self.agent.max_steps:
            raise MaxStepsExceededError()
        model = self.agent.model
        if model is None:
            raise RunError(f"Agent {self.agent.name!r} has no model")
        await self._read_news()
        self.tree.check_lease()
        self._step = self.record.step_count + 1
        reason = self.calls.redone(self._step)
        if reason is not None:
            self.emit(StepRedoChunk, reason=reason)
        request = ModelRequest(
            session_id=self.session_id,
            agent_type=self.agent.name,
            system_prompt=self.agent.rendered_system_prompt,
            messages=tuple(self.messages),
            tools=self.agent.tool_specs,
            step=self._step,
        )
        answer = await call_model(
            model,
            request,
            used_ids=self._call_ids,
            responses=self._responses,
            on_text=self._text,
            on_retry=self._retracted,
        )
        response = self.calls.redo(answer.response, self._call_ids, self._responses)
        if answer.usage is not None:
            self._usage = added_usage(self._usage, answer.usage)
        calls = response.tool_calls
        if calls:
            if not any(self._stored_first(call) for call in calls):
                return Pending(calls, unstored=response, new=True)
            # The children this response starts are stored with it, in one write. Local
            # children need not wait for it to land: their own writes follow it in the
            # stream's order. A remote server or the client must not hear of a call that a
            # crash could still take back.
            kinds = self._kinds
            children = self.children.prepare(calls, kinds)
            told_outside = any(
                self.waits_for(call) is not None
                or (call.name in kinds and kinds[call.name].outside)
                for call in calls
            )
            await self._commit([response], extra=children, wait=told_outside)
            return Pending(calls, new=True)
        if self.agent.output_schema is None:
            if await self._unread([response]):
                return NOTHING
            return await self._end(Outcome("completed", output=response.content), [response])
        await self._commit([response, UserMessage(content=FINISH_REMINDER)])
        return NOTHING

    async def _read_news(self) -> None:
        """Take into the conversation, before a model call, the notices of persistent children
        that ended and the messages queued for this session."""
        parent = self._hears_of_children
        if not (parent or self.inbox_due):
            return
        store, found = self.tree.store, News()
        if parent:
            await notices(store, self.session_id, found)
        if self.inbox_due:
            await inbox(store, self.session_id, found)
            self.inbox_due = False
        if found.messages:
            await self._commit(found.messages, extra=found.batch)

    async def _unread(self, messages: Sequence[Message]) -> bool:
        """Whether messages were queued for this session as it was about to complete: then
        they are committed after `messages` (the step that would have ended it), and it goes
        on to read them."""
        if not self.inbox_due:
            return False
        found = News(list(messages))
        await inbox(self.tree.store, self.session_id, found)
        self.inbox_due = False
        if len(found.messages) == len(messages):
            return False
        await self._commit(found.messages, extra=found.batch)
        return True

    def _text(self, delta: str) -> None:
        self.emit(TextDeltaChunk, delta=delta)

    def _retracted(self) -> None:
        if self.tree.writer.retract_text(self.session_id, self._step):
            self.emit(StepRedoChunk, reason="model_retry")

    # -- tools phase ---------------------------------------------------------------------------

    async def _tools(self, pending: Pending) -> Outcome | None:
        """Answer the pending calls, then commit the step (or end the session)."""
        for call in pending.calls:
            if call.name != FINISH_TOOL_NAME and call.id not in self.resumed.open_calls:
                self.announce(call)
            elif call.id in self.resumed.open_calls:
                self.calls.reopened(call.id, call.name, self._step)  # announced before the pause
        results = await answer_calls(self, pending.calls, new=pending.new)
        answered = [result.message for result in results if result.message is not None]
        messages: list[Message] = [*answered]
        if pending.unstored is not None:
            messages.insert(0, pending.unstored)
        if len(answered) < len(results):
            # A dropped call ends in the stream, saying so: it starts again on resume. A call
            # that waits for the client stays open until its answer ends it.
            for call, result in zip(pending.calls, results, strict=True):
                if result.dropped is not None:
                    self.emit(
                        ToolEndChunk,
                        tool_call_id=call.id,
                        tool_name=call.name,
                        error=result.dropped,
                    )
            return await self._end(Outcome("paused_awaiting_client"), messages)
        finish = next((result.finish for result in results if result.finish), None)
        if finish is not None:
            if await self._unread(messages):
                return None
            return await self._end(finish, messages)
        await self._commit(messages)
        return None

    def _stored_first(self, call: ToolCall) -> bool:
        """Whether the response must be committed before this call runs: it starts a child
        (found again by id, or by the call, after a crash) or waits for the client."""
        return (
            call.name in self._kinds
            or call.name in self._companions
            or self.waits_for(call) is not None
        )

    def waits_for(self, call: ToolCall) -> Literal["client", "approval"] | None:
        """Whether the call waits for the client's result or approval."""
        tool = self.agent.tool_map.get(call.name)
        if not isinstance(tool, Tool):
            return None
        if tool.is_client_tool:
            return "client"
        if tool.requires_approval and call.id not in self.resumed.approved:
            return "approval"
        return None

    # -- commits -------------------------------------------------------------------------------

    async def _commit(
        self, messages: Sequence[Message], *, extra: WriteBatch | None = None, wait: bool = True
    ) -> None:
        """Commit the step. With `wait`, return once it has landed (the next step starts on a
        durable one); without, once the store has taken it: the stream's later writes land after
        it, and none that builds on it lands if it fails (the rules refuse them, or the store
        fails them with it when the database did)."""
        if self.stopping is not None:
            raise asyncio.CancelledError  # stopped before the write was made: it is not
        record = stepped(
            self.record,
            step_count=self._step,
            state=dump_state(self.state),
            usage=self._usage,
            now=now_ms(),
        )
        batch = extra or WriteBatch()
        batch.updated_sessions.append(record)
        batch.messages.extend(appended(self.session_id, len(self.messages), messages))
        landed = self.tree.writer.submit(batch, hold=not wait)
        if wait:
            self.phase = Phase.COMMITTING
            try:
                await landed
            finally:
                self.phase = Phase.WORKING
        self._landed(record, messages)
        if self.stopping is not None:
            raise asyncio.CancelledError  # stopped while the write landed

    def _landed(self, record: SessionRecord, messages: Sequence[Message]) -> None:
        self.record = record
        self.messages.extend(messages)
        self._responses += sum(1 for message in messages if isinstance(message, AssistantMessage))

    async def _end(
        self, outcome: Outcome, messages: Sequence[Message] = (), *, close_stored: bool = False
    ) -> Outcome:
        """Commit the session's end: status, output or error, its chunk, and its parent's ref;
        with `close_stored`, the end of the descendants the store still has running too."""
        self.phase = Phase.ENDING
        if outcome.error is not None:
            outcome = dataclasses.replace(outcome, error=clean_text(outcome.error))
        now = now_ms()
        # A step whose model call was cut short by a stop is not a step: it will be made again.
        record = stepped(
            self.record,
            step_count=self.record.step_count if self.stopping is not None else self._step,
            state=dump_state(self.state),
            usage=self._usage,
            now=now,
            status=outcome.status,
            output=outcome.output,
            error=outcome.error,
            failure_reason=outcome.failure_reason,
        )
        if outcome.status not in ("completed", "paused_awaiting_client"):
            # Calls cut short by the stop or the failure end in the stream, saying so.
            error = f"The call did not finish: the session ended {outcome.status}"
            if outcome.failure_reason == "parent_suspended":
                error = "The session suspended before the call finished: it runs again"
            self.calls.end_open(error)
        if outcome.status == "completed":
            self.emit(OutputChunk, output=outcome.output)
        elif outcome.status == "failed":
            self.emit(ErrorChunk, error=outcome.error or "failed")
        elif outcome.status == "interrupted":
            self.emit(InterruptedChunk, reason=outcome.error)
        batch = WriteBatch(
            updated_sessions=[record],
            messages=appended(self.session_id, len(self.messages), messages),
        )
        await self.children.close(batch, now, from_store=close_stored)
        parent_id = self.record.parent_session_id
        if self.ref is not None and parent_id is not None:
            self.ref = ended_ref(self.ref, outcome.status, now)
            batch.refs.append(RefUpsert(parent_id, self.ref))
        if self.frame is not None:
            self.frame.close(self.tree.writer, outcome)
        if self.lane is not None:
            self.lane.end(batch, outcome, self.session_id)
        last = self.tree.close(self, outcome, batch)
        # A child's parent goes on once its end is taken: the parent's next write follows it
        # (and may carry it: the store may hold it for that). The end of a tree is what its
        # caller waits for, so it must have landed; a background session's frees a slot that
        # queued sessions wait for, so it is not held either.
        landed = self.tree.writer.submit(batch, hold=not last and self.lane is None)
        if self.lane is not None:
            self.lane.ended(landed)
        if last:
            await landed
        self._landed(record, messages)
        return outcome

    async def _stopped(self) -> Outcome:
        """End a run stopped from outside, once its children have recorded their own stop; the
        stop reaches the children the store has running that this run never reopened (it was
        stopped before it got to them, after a takeover say)."""
        await self.children.settled()
        assert self.stopping is not None
        return await self._end(stopped_outcome(self.stopping), close_stored=True)

    async def abandon(self) -> None:
        """Stop every running descendant without a further write (the process gives the tree
        up, as if it had crashed) and wait until they are gone."""
        self.children.stop(Stop("shutdown"))
        await self.children.settled()
