"""Client tools, approvals, and the cascade when a session suspends while its children run."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from pydantic import BaseModel

from app import AgentRegistry, AgentRuntime, create_sub_agent_tool, define_agent, define_tool
from app.agents import AgentConfig, ToolContext
from app.errors import InvalidRequestError, SessionNotResumableError, StoreUnavailableError
from app.models import FunctionModel, ModelRequest, ModelResponse, ToolCall
from app.protocol import Chunk, ToolEndChunk, ToolMessage
from app.runtime.inputs import REJECTED
from app.store import MemoryStore, StateStore, WriteBatch
from tests.support import check_tool_calls, snapshot, until_status


class Question(BaseModel):
    question: str


class Amount(BaseModel):
    amount: int


class Job(BaseModel):
    message: str


class Done(BaseModel):
    done: str


def results(request: ModelRequest) -> dict[str, Any]:
    return {
        m.tool_call_id: m.result if m.error is None else f"error: {m.error}"
        for m in request.messages
        if isinstance(m, ToolMessage)
    }


async def follow(runtime: AgentRuntime, session_id: str) -> list[Chunk]:
    return [chunk async for chunk in runtime.follow(session_id)]


def client_agent(paid: Counter[str]) -> AgentConfig:
    ask = define_tool("ask_user", description="Ask the user.", input_schema=Question)

    @define_tool("pay", description="Pay.", input_schema=Amount, requires_approval=True)
    async def pay(input: Amount, ctx: ToolContext[Any]) -> str:
        paid["pay"] += 1
        return f"paid {input.amount}"

    def model(request: ModelRequest) -> ModelResponse:
        seen = results(request)
        if not seen:
            return ModelResponse(
                tool_calls=[
                    ToolCall("ask_user", {"question": "Which city?"}, id="q"),
                    ToolCall("pay", {"amount": 5}, id="p"),
                ]
            )
        return ModelResponse(text=f"city={seen['q']} pay={seen['p']}")

    return define_agent("shopper", tools=[ask, pay], model=FunctionModel(model))


async def test_a_session_pauses_for_the_client_and_resumes_with_answers(store: StateStore) -> None:
    paid: Counter[str] = Counter()
    agent = client_agent(paid)
    async with AgentRuntime(AgentRegistry([agent]), store=store) as runtime:
        paused = await (await runtime.execute(agent, "buy", session_id="s")).result()
        first = await follow(runtime, "s")
        status = await runtime.status("s")
        assert (paused.status, status.status) == ("paused_awaiting_client",) * 2
        assert snapshot(first) == [
            '1 s tool_start ask_user#q {"question":"Which city?"}',
            '2 s tool_start pay#p {"amount":5}',
            "3 s tool_pending ask_user#q client",
            "4 s tool_pending pay#p approval",
        ]
        assert await runtime.interrupt("s") == "paused_awaiting_client"

        resumed = await runtime.resume(
            "s",
            tool_results=[{"toolCallId": "q", "result": "Paris"}],
            approvals=[{"toolCallId": "p", "approved": True}],
        )
        done = await resumed.result()
        whole = await follow(runtime, "s")

    assert (done.status, done.output) == ("completed", "city=Paris pay=paid 5")
    assert paid == {"pay": 1}
    # The calls stay open while they wait: the answer ends one, the approved run the other.
    assert snapshot(whole[4:]) == [
        '5 s tool_end ask_user#q "Paris"',
        '6 s tool_end pay#p "paid 5"',
        "7 s text_delta 'city=Paris pay=paid 5'",
        '8 s output "city=Paris pay=paid 5"',
    ]


async def test_a_rejected_approval_reaches_the_model_as_a_tool_error(store: StateStore) -> None:
    paid: Counter[str] = Counter()
    agent = client_agent(paid)
    async with AgentRuntime(AgentRegistry([agent]), store=store) as runtime:
        await (await runtime.execute(agent, "buy", session_id="s")).result()
        done = await (
            await runtime.resume(
                "s",
                tool_results=[{"tool_call_id": "q", "result": {"city": "Rome"}}],
                approvals=[{"tool_call_id": "p", "approved": False}],
            )
        ).result()
    assert done.output == f"city={{'city': 'Rome'}} pay=error: {REJECTED}"
    assert paid == {}


@pytest.mark.parametrize(
    ("answers", "message"),
    [
        (
            {"tool_results": [{"toolCallId": "q", "result": 1}]},
            "approvals: an approval is missing for p \\(session s\\)",
        ),
        (
            {"approvals": [{"toolCallId": "p", "approved": True}]},
            "toolResults: a client tool.s result is missing for q \\(session s\\)",
        ),
        (
            {
                "tool_results": [
                    {"toolCallId": "q", "result": 1},
                    {"toolCallId": "zz", "result": 2},
                ],
                "approvals": [{"toolCallId": "p", "approved": True}],
            },
            "toolResults: no call awaiting a client tool's result has the id zz \\(session s\\)",
        ),
        (
            {"tool_results": [{"toolCallId": "p", "result": 1}]},
            "toolResults: no call awaiting a client tool's result has the id p \\(session s\\)",
        ),
        ({"tool_results": [{"toolCallId": "q"}] * 2}, "toolResults answers q more than once"),
        ({"tool_results": [{"result": 1}]}, "Invalid answers: 0.toolCallId: Field required"),
        ({"message": "hello"}, "waits for tool results or approvals, not a message"),
        ({}, "toolResults: a client tool's result is missing for q"),
    ],
)
async def test_answers_that_do_not_fit_change_nothing(
    answers: dict[str, Any], message: str
) -> None:
    agent = client_agent(Counter())
    async with AgentRuntime(AgentRegistry([agent])) as runtime:
        await (await runtime.execute(agent, "buy", session_id="s")).result()
        before = await runtime.store.load_messages("s")
        with pytest.raises(InvalidRequestError, match=message):
            await runtime.resume("s", **answers)
        assert await runtime.store.load_messages("s") == before
        assert (await runtime.status("s")).status == "paused_awaiting_client"


async def test_answers_for_a_session_that_waits_for_none_are_refused() -> None:
    agent = define_agent("plain", model=FunctionModel(lambda r: ModelResponse(text="hi")))
    async with AgentRuntime(AgentRegistry([agent])) as runtime:
        await (await runtime.execute(agent, "x", session_id="s")).result()
        with pytest.raises(SessionNotResumableError, match="it waits for no tool results"):
            await runtime.resume("s", "more", tool_results=[{"toolCallId": "a", "result": 1}])
        with pytest.raises(SessionNotResumableError):
            await runtime.resume("s")


def cascade_tree(calls: Counter[str], latency: dict[str, float]) -> AgentConfig:
    """A coordinator whose first response asks the user and, in the same step, runs a slow
    tool and three children: `quick` completes, `broken` fails, `slow` is still running when the
    step's tool is done, so the coordinator suspends and drops it."""

    def child(name: str) -> AgentConfig:
        def model(request: ModelRequest) -> Any:
            turn = sum(m.role == "assistant" for m in request.messages)
            calls[f"{name} {turn}"] += 1

            async def answer() -> ModelResponse:
                await asyncio.sleep(latency.get(name, 0))
                if name == "broken":
                    raise RuntimeError("broken child")
                return ModelResponse(tool_calls=[ToolCall("__finish__", {"done": name})])

            return answer()

        return define_agent(name, output_schema=Done, model=FunctionModel(model))

    @define_tool("lookup", description="Slow lookup.", input_schema=Question)
    async def lookup(input: Question, ctx: ToolContext[Any]) -> str:
        calls["lookup"] += 1
        await asyncio.sleep(0.3)
        return "looked up"

    ask = define_tool("ask_user", description="Ask.", input_schema=Question)
    children = {name: child(name) for name in ("quick", "broken", "slow")}

    def model(request: ModelRequest) -> ModelResponse:
        seen = results(request)
        if not seen:
            return ModelResponse(
                tool_calls=[
                    ToolCall("ask_user", {"question": "ok?"}, id="ask"),
                    ToolCall("lookup", {"question": "x"}, id="look"),
                    *(
                        ToolCall(f"subagent__{name}", {"message": name}, id=name)
                        for name in children
                    ),
                ]
            )
        return ModelResponse(text=" | ".join(f"{k}={v}" for k, v in sorted(seen.items())))

    return define_agent(
        "coordinator",
        tools=[ask, lookup, *(create_sub_agent_tool(c, Job) for c in children.values())],
        model=FunctionModel(model),
    )


async def test_the_cascade_drops_running_children_and_restarts_them_on_resume(
    store: StateStore,
) -> None:
    calls: Counter[str] = Counter()
    latency = {"quick": 0.01, "broken": 0.01, "slow": 5}
    coordinator = cascade_tree(calls, latency)
    async with AgentRuntime(AgentRegistry([coordinator]), store=store) as runtime:
        paused = await (await runtime.execute(coordinator, "go", session_id="c")).result()
        refs = {r.sub_session_id: r.status for r in (await runtime.status("c")).sub_sessions}
        slow = await runtime.status("c-sub-slow")
        assert paused.status == "paused_awaiting_client"
        # completed -> its result; failed -> a tool error; running -> failed, parent_suspended.
        assert refs == {
            "c-sub-quick": "completed",
            "c-sub-broken": "failed",
            "c-sub-slow": "failed",
        }
        assert (slow.status, slow.failure_reason) == ("failed", "parent_suspended")
        assert (await runtime.status("c-sub-broken")).failure_reason is None

        latency["slow"] = 0
        done = await (
            await runtime.resume("c", tool_results=[{"toolCallId": "ask", "result": "yes"}])
        ).result()
        restarted = await runtime.status("c-sub-slow")
        slow_messages = await runtime.store.load_messages("c-sub-slow")

    assert done.output == (
        "ask=yes | broken=error: broken child | look=looked up | quick={'done': 'quick'} | "
        "slow={'done': 'slow'}"
    )
    # The dropped child started again from scratch; the others ran once, the tool once.
    assert calls == {"quick 0": 1, "broken 0": 1, "slow 0": 2, "lookup": 1}
    assert (restarted.status, restarted.failure_reason) == ("completed", None)
    assert [m.role for m in slow_messages] == ["user", "assistant", "tool"]


@pytest.mark.parametrize(
    ("status", "failure_reason", "expected", "slow_calls"),
    [
        ("terminated", None, "slow=error: The sub-agent was terminated", 1),
        ("failed", "timeout", "slow=error: it broke", 1),
        ("completed", None, "slow={'done': 'already'}", 1),
        ("interrupted", None, "slow={'done': 'slow'}", 2),
    ],
)
async def test_each_row_of_the_cascade_table_on_resume(
    store: StateStore, status: str, failure_reason: str | None, expected: str, slow_calls: int
) -> None:
    calls: Counter[str] = Counter()
    latency = {"quick": 0.01, "broken": 0.01, "slow": 5}
    coordinator = cascade_tree(calls, latency)
    async with AgentRuntime(AgentRegistry([coordinator]), store=store) as runtime:
        await (await runtime.execute(coordinator, "go", session_id="c")).result()
        dropped = await store.get_session("c-sub-slow")
        changed = dropped.evolve(
            status=status,
            failure_reason=failure_reason,
            error="it broke" if status == "failed" else None,
            output={"done": "already"} if status == "completed" else None,
        )
        await store.commit(WriteBatch(updated_sessions=[changed]))
        latency["slow"] = 0
        done = await (
            await runtime.resume("c", tool_results=[{"toolCallId": "ask", "result": "yes"}])
        ).result()
    assert done.status == "completed"
    assert expected in str(done.output)
    assert calls["slow 0"] + calls["slow 1"] == slow_calls


async def test_a_resume_cut_short_after_its_write_still_ends_the_answered_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The write that appends the answer lands, but the resume never hears so (its answer is
    lost) and its run never starts: the takeover that runs the tree on ends the answered call
    in the stream, from the conversation, before anything else."""
    ask = define_tool("ask_user", description="Ask the user.", input_schema=Question)

    def model(request: ModelRequest) -> ModelResponse:
        seen = results(request)
        if not seen:
            question = ToolCall("ask_user", {"question": "Which city?"}, id="q")
            return ModelResponse(tool_calls=[question])
        return ModelResponse(text=f"city={seen['q']}")

    agent = define_agent("asker", tools=[ask], model=FunctionModel(model))
    registry = AgentRegistry([agent])
    async with (
        MemoryStore() as store,
        AgentRuntime(registry, store=store, lease_ms=200, takeover_interval=0.05) as runtime,
    ):
        paused = await (await runtime.execute(agent, "go", session_id="s")).result()
        assert paused.status == "paused_awaiting_client"
        submit = store.submit
        lost = [StoreUnavailableError("The answer to the commit was lost (test)")]

        def lossy(batch: WriteBatch, *, hold: bool = False) -> asyncio.Future[None]:
            landed = submit(batch, hold=hold)
            if not (lost and batch.messages):
                return landed
            failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            failed.set_exception(lost.pop())
            return failed

        monkeypatch.setattr(store, "submit", lossy)
        with pytest.raises(StoreUnavailableError):
            await runtime.resume("s", tool_results=[{"toolCallId": "q", "result": "Paris"}])
        await until_status(store, "s", "completed")
        chunks = await follow(runtime, "s")

    ends = [(c.tool_call_id, c.result) for c in chunks if isinstance(c, ToolEndChunk)]
    assert ends == [("q", "Paris")]
    check_tool_calls(chunks, "completed")
