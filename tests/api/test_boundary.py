"""Every client mistake is a clear 4xx that changes nothing (issue 18, cases 1 to 3), on both
SQL stores, against a real server."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from app import define_agent
from app.agents import AgentConfig, AgentRegistry
from app.api.middleware import bearer_token
from app.models import FunctionModel, ModelResponse
from app.protocol.values import MAX_SEQUENCE
from app.settings import Settings
from tests.api.conftest import Server, read_stream, serve
from tests.api.test_http import wait_status
from tests.databases import database_url
from tests.runtime.agents import Calls, adder, delegator
from tests.runtime.test_client_tools import client_agent

TASK = {"task": "t", "a": 1, "b": 2}


class Tally(BaseModel):
    count: int = 0
    label: str = "none"


def keeper() -> AgentConfig:
    """An agent whose custom state takes `count` and `label` from its input."""
    return define_agent(
        "keeper",
        state_schema=Tally,
        model=FunctionModel(lambda request: ModelResponse(text="kept")),
    )


@pytest.fixture(params=["sqlite", "postgres"])
async def database(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    async with database_url(request.param, tmp_path) as url:
        yield url


@pytest.fixture
async def server(database: str) -> AsyncIterator[Server]:
    calls = Calls()
    registry = AgentRegistry(
        [
            delegator(calls, adder(calls, latency=0.05), latency=0.05),
            client_agent(Counter()),
            keeper(),
        ]
    )
    settings = Settings(database_url=database, stream_heartbeat=0.2, stream_poll=0.2)
    async with serve(registry, calls, settings) as running:
        yield running


@pytest.fixture
async def client(server: Server) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as opened:
        yield opened


def error_of(response: httpx.Response) -> tuple[int, str]:
    body = response.json()
    assert set(body) == {"error"}, body
    assert body["error"]["message"], body
    return response.status_code, body["error"]["code"]


async def sessions_of(database: str) -> set[str]:
    """Every session the database holds (roots and children), by id, read apart from the server."""
    engine = create_async_engine(database, poolclass=NullPool)
    try:
        async with engine.connect() as connection:
            rows = await connection.exec_driver_sql("SELECT session_id FROM sessions")
            return {row[0] for row in rows}
    finally:
        await engine.dispose()


def post_json(client: httpx.AsyncClient, path: str, text: str) -> Any:
    return client.post(path, content=text.encode(), headers={"content-type": "application/json"})


# -- 1. numbers, unicode and depth ------------------------------------------------------------


async def test_sequences_beyond_64_bits_are_422s_and_unknown_streams_404s(
    client: httpx.AsyncClient,
) -> None:
    await client.post("/start", json={"agentType": "parent", "message": "go", "sessionId": "s"})
    whole = await read_stream(client, "s")
    huge = "99999999999999999999"
    answers = [
        await client.get("/stream/s", params={"fromSequence": huge}),
        await client.get("/stream/s", headers={"Last-Event-ID": huge}),
        await client.get("/stream/s", headers={"Last-Event-ID": "9" * 5000}),
        await client.get("/stream/s", params={"fromSequence": str(MAX_SEQUENCE + 1)}),
        await client.get("/stream/nope", headers={"Last-Event-ID": huge}),
        await client.get("/stream/s", headers={"Last-Event-ID": "+5"}),
    ]
    assert [error_of(answer) for answer in answers] == [(422, "invalid_request")] * 6
    # The connection that carried them still serves: nothing broke on the server's side.
    assert (await client.get("/status/s")).json()["status"] == "completed"
    unknown = await client.get("/stream/nope", headers={"Last-Event-ID": str(MAX_SEQUENCE)})
    assert error_of(unknown) == (404, "stream_not_found")
    past_the_end = await read_stream(client, "s", params={"fromSequence": MAX_SEQUENCE})
    assert (past_the_end.chunks, past_the_end.end) == ([], {"status": "completed"})
    tail = await read_stream(client, "s", headers={"Last-Event-ID": "3"})
    assert tail.chunks == whole.chunks[3:]


START_BODIES = {
    "lone surrogate in the message": (
        '{"agentType": "parent", "message": "\\ud800", "sessionId": "v"}',
        "invalid_json",
    ),
    "NaN in the input": (
        '{"agentType": "keeper", "message": "m", "input": {"n": NaN}, "sessionId": "v"}',
        "invalid_json",
    ),
    "Infinity in the input": (
        '{"agentType": "keeper", "message": "m", "input": {"n": -Infinity}, "sessionId": "v"}',
        "invalid_json",
    ),
    "a number beyond doubles": (
        '{"agentType": "keeper", "message": "m", "input": {"n": 1e400}, "sessionId": "v"}',
        "invalid_json",
    ),
    "an integer beyond 64 bits": (
        '{"agentType": "keeper", "message": "m", "input": {"n": 18446744073709551616}, '
        '"sessionId": "v"}',
        "unsupported_value",
    ),
    "input nested 255 levels": (
        '{"agentType": "keeper", "message": "m", "sessionId": "v", "input": {"a": '
        + "[" * 255
        + "]" * 255
        + "}}",
        "unsupported_value",
    ),
    "NUL in the message": (
        '{"agentType": "parent", "message": "a\\u0000b", "sessionId": "v"}',
        "unsupported_value",
    ),
    "NUL in an input key": (
        '{"agentType": "keeper", "input": {"k\\u0000": 1}, "sessionId": "v"}',
        "unsupported_value",
    ),
    "NUL in an input value": (
        '{"agentType": "keeper", "input": {"label": "\\u0000"}, "sessionId": "v"}',
        "unsupported_value",
    ),
}


@pytest.mark.parametrize("case", list(START_BODIES))
async def test_values_a_store_cannot_hold_are_422s_that_create_nothing(
    client: httpx.AsyncClient, database: str, case: str
) -> None:
    text, code = START_BODIES[case]
    answer = await post_json(client, "/start", text)
    assert error_of(answer) == (422, code)
    assert await sessions_of(database) == set()


@pytest.mark.parametrize("path", ["/start", "/interrupt/x1", "/resume/x1"])
async def test_a_body_that_is_not_utf8_is_a_422(client: httpx.AsyncClient, path: str) -> None:
    answer = await client.post(
        path, content=b"\xff\xfe{", headers={"content-type": "application/json"}
    )
    assert error_of(answer) == (422, "invalid_json")


async def test_an_interrupt_reason_with_nul_is_a_422_that_leaves_the_run_alone(
    client: httpx.AsyncClient,
) -> None:
    await client.post("/start", json={"agentType": "parent", "message": "go", "sessionId": "r"})
    refused = await post_json(client, "/interrupt/r", '{"reason": "stop\\u0000now"}')
    assert error_of(refused) == (422, "unsupported_value")
    read = await read_stream(client, "r")
    assert read.end == {"status": "completed"}
    assert "interrupted" not in [chunk.type for chunk in read.chunks]


async def test_answers_a_store_cannot_hold_are_422s_that_leave_the_session_paused(
    client: httpx.AsyncClient,
) -> None:
    await client.post("/start", json={"agentType": "shopper", "message": "buy", "sessionId": "p"})
    assert (await read_stream(client, "p")).end == {"status": "paused_awaiting_client"}
    deep = "[" * 255 + "]" * 255
    for text, code in [
        (f'{{"toolResults": [{{"toolCallId": "q", "result": {deep}}}]}}', "unsupported_value"),
        ('{"toolResults": [{"toolCallId": "q", "result": "\\u0000"}]}', "unsupported_value"),
        ('{"toolResults": [{"toolCallId": "q", "result": NaN}]}', "invalid_json"),
        ('{"toolResults": [{"toolCallId": "q\\udc00", "result": 1}]}', "invalid_json"),
    ]:
        assert error_of(await post_json(client, "/resume/p", text)) == (422, code), text
    assert (await client.get("/status/p")).json()["status"] == "paused_awaiting_client"


# -- 2. inputs, idempotency keys, parents and ids ---------------------------------------------


async def test_an_input_must_fit_the_published_input_schema(
    client: httpx.AsyncClient, database: str
) -> None:
    published = (await client.get("/agents")).json()[1]
    assert (published["name"], published["inputSchema"]["required"]) == (
        "adder",
        ["task", "a", "b"],
    )
    refused = await client.post(
        "/start", json={"agentType": "adder", "input": {"task": "t", "a": "x"}, "sessionId": "i"}
    )
    assert error_of(refused) == (422, "invalid_input")
    assert [detail["loc"] for detail in refused.json()["error"]["details"]] == [
        ["body", "input", "a"],
        ["body", "input", "b"],
    ]
    assert await sessions_of(database) == set()
    accepted = await client.post(
        "/start", json={"agentType": "adder", "input": TASK, "sessionId": "i"}
    )
    assert accepted.status_code == 201
    assert (await wait_status(client, "i", "completed"))["output"] == {"total": 3}


async def test_an_input_must_fit_the_state_schema(
    client: httpx.AsyncClient, server: Server, database: str
) -> None:
    refused = await client.post(
        "/start", json={"agentType": "keeper", "input": {"count": "many"}, "sessionId": "k"}
    )
    assert error_of(refused) == (422, "invalid_input")
    assert refused.json()["error"]["details"][0]["loc"] == ["body", "input", "count"]
    assert await sessions_of(database) == set()
    accepted = await client.post(
        "/start", json={"agentType": "keeper", "input": {"count": 2, "x": 1}, "sessionId": "k"}
    )
    assert accepted.status_code == 201
    assert (await server.runtime.store.get_session("k")).state == {"count": 2, "label": "none"}


async def test_an_idempotency_key_is_bound_to_its_request(
    client: httpx.AsyncClient, database: str
) -> None:
    key = {"Idempotency-Key": "order-7"}
    body = {"agentType": "adder", "input": TASK}
    first = await client.post("/start", json=body, headers=key)
    # The same request spelled otherwise (key order, spaces) is the same request.
    again = await post_json(
        client, "/start", json.dumps({"input": {"b": 2, "a": 1, "task": "t"}, "agentType": "adder"})
    )
    assert again.status_code == 201  # no key: a new session
    replay = await client.post(
        "/start",
        content=json.dumps(
            {"input": {"b": 2, "task": "t", "a": 1}, "agentType": "adder"}, indent=2
        ),
        headers={**key, "content-type": "application/json"},
    )
    other = await client.post("/start", json={**body, "message": "other"}, headers=key)
    other_agent = await client.post(
        "/start", json={"agentType": "parent", "message": "go"}, headers=key
    )
    assert (first.status_code, replay.status_code) == (201, 200)
    assert replay.json() == first.json()
    assert error_of(other) == (422, "idempotency_key_reused")
    assert error_of(other_agent) == (422, "idempotency_key_reused")
    assert first.json()["sessionId"] in other.json()["error"]["message"]
    assert await sessions_of(database) == {first.json()["sessionId"], again.json()["sessionId"]}


async def test_racing_starts_with_one_key_make_one_session(
    client: httpx.AsyncClient, database: str
) -> None:
    key = {"Idempotency-Key": "race"}
    same = {"agentType": "adder", "input": TASK}
    answers = await asyncio.gather(
        *(client.post("/start", json=same, headers=key) for _ in range(6)),
        *(client.post("/start", json={**same, "message": f"m{i}"}, headers=key) for i in range(3)),
    )
    statuses = Counter(answer.status_code for answer in answers)
    (created,) = [answer.json() for answer in answers if answer.status_code == 201]
    assert statuses[201] == 1
    assert statuses[200] + statuses[422] == 8
    assert {answer.json()["sessionId"] for answer in answers if answer.status_code == 200} <= {
        created["sessionId"]
    }
    assert await sessions_of(database) == {created["sessionId"]}


async def test_an_unknown_parent_session_is_a_404_that_creates_nothing(
    client: httpx.AsyncClient, database: str
) -> None:
    start = {"agentType": "adder", "input": TASK}
    ghost = await client.post(
        "/start", json={**start, "sessionId": "c", "parentSessionId": "ghost"}
    )
    assert error_of(ghost) == (404, "parent_session_not_found")
    assert await sessions_of(database) == set()
    parent = await client.post("/start", json={**start, "sessionId": "real"})
    child = await client.post("/start", json={**start, "sessionId": "c", "parentSessionId": "real"})
    # A remote child names its parent on the calling server, which this one cannot know.
    remote = await client.post(
        "/start", json={**start, "sessionId": "far-remote-call-1", "parentSessionId": "far"}
    )
    assert (parent.status_code, child.status_code, remote.status_code) == (201, 201, 201)
    assert (await client.get("/status/c")).json()["parentSessionId"] == "real"


@pytest.mark.parametrize("field", ["sessionId", "parentSessionId"])
async def test_a_session_id_with_a_trailing_newline_is_refused(
    client: httpx.AsyncClient, database: str, field: str
) -> None:
    body = {"agentType": "adder", "input": TASK, field: "abc\n"}
    assert error_of(await client.post("/start", json=body)) == (422, "invalid_session_id")
    assert await sessions_of(database) == set()
    assert error_of(await client.get("/status/abc%0A")) == (422, "invalid_session_id")


# -- 3. HTTP conventions ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "content_type",
    ["application/x-www-form-urlencoded", "text/plain", None, "application/json; charset=latin-1"],
)
async def test_a_body_that_is_not_json_is_a_415(
    client: httpx.AsyncClient, database: str, content_type: str | None
) -> None:
    headers = {} if content_type is None else {"content-type": content_type}
    text = b'{"agentType": "adder", "input": {"task": "t", "a": 1, "b": 2}, "sessionId": "m"}'
    for path in ("/start", "/interrupt/m", "/resume/m", "/ai-sdk/chat", "/ag-ui/adder"):
        answer = await client.post(path, content=text, headers=headers)
        assert error_of(answer) == (415, "unsupported_media_type"), path
    assert await sessions_of(database) == set()
    # Without a body the content type does not matter.
    assert (await client.post("/interrupt/m", headers=headers)).status_code == 404
    accepted = await client.post(
        "/start", content=text, headers={"content-type": "application/json; charset=UTF-8"}
    )
    assert accepted.status_code == 201


async def test_a_parameter_of_one_value_given_twice_is_a_422(client: httpx.AsyncClient) -> None:
    # Starlette would keep the last value; the document says one integer, not a list.
    await client.post("/start", json={"agentType": "adder", "input": TASK, "sessionId": "q"})
    await read_stream(client, "q")
    repeated = [
        "/stream/q?fromSequence=x&fromSequence=1",
        "/stream/q/ai-sdk?fromSequence=1&fromSequence=1",
        "/stream/q/ag-ui?fromSequence=0&fromSequence=2",
        "/status/q?tree=true&tree=false",
        "/sessions?limit=1&limit=2",
        "/sessions/q/messages?offset=0&offset=1",
    ]
    for path in repeated:
        answer = await client.get(path)
        assert error_of(answer) == (422, "invalid_request"), path
        assert answer.json()["error"]["details"][0]["loc"][0] == "query", path
    # A list parameter takes as many values as it is given.
    listed = await client.get("/sessions?status=completed&status=failed")
    assert [s["sessionId"] for s in listed.json()["sessions"]] == ["q"]


async def test_a_trailing_slash_is_a_404_that_names_the_path(client: httpx.AsyncClient) -> None:
    answer = await client.post("/start/", json={"agentType": "adder", "input": TASK})
    assert error_of(answer) == (404, "not_found")
    assert "/start" in answer.json()["error"]["message"]
    assert error_of(await client.get("/status/x/")) == (404, "not_found")
    assert error_of(await client.get("/agents/")) == (404, "not_found")


@pytest.mark.parametrize(
    ("authorization", "accepted"),
    [
        ("Bearer k-1", True),
        ("bearer k-1", True),
        ("BEARER k-1", True),
        ("Bearer   k-1", True),
        ("Bearer k-2", False),
        ("Basic k-1", False),
        ("Bearerk-1", False),
        ("k-1", False),
        ("", False),
    ],
)
def test_the_bearer_scheme_is_case_insensitive(authorization: str, accepted: bool) -> None:
    token = bearer_token(authorization.encode())
    assert (token == b"k-1") is accepted


async def test_the_api_key_is_asked_for_with_any_spelling_of_bearer(tmp_path: Path) -> None:
    calls = Calls()
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path}/k.db", api_key="k-1")
    async with (
        serve(AgentRegistry([adder(calls)]), calls, settings) as server,
        httpx.AsyncClient(base_url=server.url) as client,
    ):
        spelled = [
            (await client.get("/agents", headers={"Authorization": scheme + " k-1"})).status_code
            for scheme in ("Bearer", "bearer", "BEARER")
        ]
        refused = await client.get("/agents", headers={"Authorization": "Bearer k-2"})
        document = (
            await client.get("/openapi.json", headers={"Authorization": "bearer k-1"})
        ).json()
    assert spelled == [200, 200, 200]
    assert error_of(refused) == (401, "unauthorized")
    assert document["paths"]["/agents"]["get"]["security"] == [{"bearer": []}]
    assert "security" not in document["paths"]["/healthz"]["get"]
