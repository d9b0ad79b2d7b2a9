"""A network partition between the server and PostgreSQL: the store's connections go half-open
(dead, and silent about it). Requests and writes fail within their timeouts instead of hanging,
readiness says so, and once the network heals the store works again, wake-ups included."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from app import AgentRegistry, AgentRuntime, define_agent, define_tool
from app.agents import ToolContext
from app.errors import StoreUnavailableError
from app.models import FunctionModel, ModelRequest, ModelResponse, ToolCall
from app.protocol import TextDeltaChunk, ToolMessage
from app.store import ChunkAppend, DatabaseTimeouts, WriteBatch
from app.store.sql import SqlStore
from tests.proxy import Proxy, proxy_to
from tests.support import until, until_status

pytestmark = pytest.mark.postgres

FAST = DatabaseTimeouts(connect=1.0, statement=1.0)


def through(postgres_url: str, proxy: Proxy) -> str:
    return make_url(postgres_url).set(host="127.0.0.1", port=proxy.port).render_as_string(False)


def delta(sequence: int) -> TextDeltaChunk:
    return TextDeltaChunk(
        sequence=sequence, agent_id="s", agent_type="a", step=1, timestamp=0, delta="x"
    )


async def test_a_partition_fails_writes_in_time_and_the_store_recovers(postgres_url: str) -> None:
    url = make_url(postgres_url)
    async with (
        proxy_to(url.host or "127.0.0.1", url.port or 5432) as proxy,
        SqlStore(through(postgres_url, proxy), timeouts=FAST) as store,
        SqlStore(postgres_url) as direct,
    ):
        await store.commit(WriteBatch(chunks=[ChunkAppend("s", [delta(1)])]))
        proxy.blackhole()
        with pytest.raises(StoreUnavailableError):
            async with asyncio.timeout(10):
                await store.commit(WriteBatch(chunks=[ChunkAppend("s", [delta(2)])]))
        with pytest.raises(StoreUnavailableError):
            async with asyncio.timeout(5):
                await store.ping()
        proxy.heal()
        await store.ping()
        await store.commit(WriteBatch(chunks=[ChunkAppend("s", [delta(2)])]))
        assert (await store.get_stream("s")).last_sequence == 2
        # Wake-ups from other processes reach it again (its LISTEN connection was half-open).
        async with store.watch_stream("s") as watch:
            await watch.read(after=2, limit=10)
            await direct.commit(WriteBatch(chunks=[ChunkAppend("s", [delta(3)])]))
            async with asyncio.timeout(15):
                while (await watch.read(after=2, limit=10)).last_sequence < 3:
                    await watch.wait(1.0)


async def test_a_run_caught_by_a_partition_is_resumed_once_the_network_heals(
    postgres_url: str,
) -> None:
    calls: Counter[str] = Counter()
    cut = asyncio.Event()

    async def count(input: Any, ctx: ToolContext[Any]) -> int:
        calls[f"tool {ctx.tool_call_id}"] += 1
        cut.set()
        await asyncio.sleep(0.3)  # the partition starts while the tool runs
        return 1

    def model(request: ModelRequest) -> ModelResponse:
        turn = sum(m.role == "assistant" for m in request.messages)
        calls[f"model {turn}"] += 1
        if not any(isinstance(m, ToolMessage) for m in request.messages):
            return ModelResponse(tool_calls=[ToolCall("count", {})])
        return ModelResponse(text="counted")

    from pydantic import BaseModel

    class Nothing(BaseModel):
        pass

    tool = define_tool("count", description="Count.", input_schema=Nothing)(count)
    registry = AgentRegistry([define_agent("counter", tools=[tool], model=FunctionModel(model))])
    url = make_url(postgres_url)
    async with (
        proxy_to(url.host or "127.0.0.1", url.port or 5432) as proxy,
        SqlStore(through(postgres_url, proxy), timeouts=FAST) as store,
        SqlStore(postgres_url) as direct,
        AgentRuntime(registry, store=store, lease_ms=1500, takeover_interval=0.2) as runtime,
    ):
        await runtime.execute("counter", "go", session_id="c")
        await cut.wait()
        proxy.blackhole()
        await asyncio.sleep(3)
        assert (await direct.get_session("c")).status == "running"
        proxy.heal()
        await until_status(direct, "c", "completed", timeout=30)
        await until(lambda: not runtime.trees)
    # The step in flight at the partition was not committed: its model call and tool ran again.
    assert calls == Counter({"model 0": 2, "tool call-0-0": 2, "model 1": 1})
