"""No endpoint answers 5xx to generated requests: schemathesis over the server's own OpenAPI
document, valid and invalid inputs, against a real server running the shipped demo agents.

Every operation gets valid and invalid requests and its documented examples. The test is
synchronous (schemathesis drives hypothesis and `requests`); its server is a subprocess like every
other e2e server. It draws cases from `APIOperation.as_strategy` itself rather than through
`schema.parametrize`, whose pytest plugin reads a private attribute that pytest 9 no longer has.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from tests.e2e.conftest import ROOT, START_TIMEOUT, free_port, server_command, server_env

pytestmark = pytest.mark.slow

MAX_EXAMPLES = 40
"""Examples per operation: with 8 operations, a few hundred requests in a few seconds."""


@pytest.fixture(scope="module")
def api_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server running the demo agents without latency, on a fresh SQLite file."""
    folder = tmp_path_factory.mktemp("fuzz")
    env = server_env(
        f"sqlite+aiosqlite:///{folder / 'store.db'}",
        AGENT_MODULE="app.demo:registry",
        DEMO_LATENCY="0",
    )
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with (folder / "server.log").open("wb") as log:
        process = subprocess.Popen(
            server_command(port), cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        _wait_ready(url, process, folder / "server.log")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def _wait_ready(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    with httpx.Client(base_url=url, timeout=2, trust_env=False) as client:
        while time.monotonic() < deadline and process.poll() is None:
            with contextlib.suppress(httpx.TransportError):
                if client.get("/readyz").status_code == 200:
                    return
            time.sleep(0.05)
    raise AssertionError(f"the server did not start\n{log.read_text(errors='replace')[-3000:]}")


def check_response(case: schemathesis.Case, api_url: str, session: requests.Session) -> None:
    """One generated request: never a 5xx, and every 4xx in the API's one error shape."""
    response = case.call(base_url=api_url, session=session, timeout=10)
    where = f"{case.as_curl_command()}\n-> {response.status_code} {response.text[:500]}"
    assert response.status_code < 500, where
    if response.status_code >= 400:
        error = response.json()["error"]
        assert isinstance(error["code"], str), where
        assert isinstance(error["message"], str), where
        assert error["code"], where
        assert error["message"], where


BOUNDED = settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
"""A fixed seed and no example database: the same requests every run, nothing written to disk."""


def test_no_endpoint_answers_5xx(api_url: str) -> None:
    session = requests.Session()
    session.trust_env = False  # loopback only, whatever proxy the environment names
    document = session.get(f"{api_url}/openapi.json", timeout=10).json()
    schema = schemathesis.openapi.from_dict(document)
    operations = [result.ok() for result in schema.get_all_operations()]
    nothing_to_break: list[str] = []
    for operation in operations:
        strategies = [
            (
                GenerationMode.POSITIVE,
                operation.as_strategy(generation_mode=GenerationMode.POSITIVE),
            ),
            (
                GenerationMode.NEGATIVE,
                operation.as_strategy(generation_mode=GenerationMode.NEGATIVE),
            ),
            *((None, strategy) for strategy in schema.get_strategies_from_examples(operation)),
        ]
        for mode, strategy in strategies:

            @BOUNDED
            @given(case=strategy)
            def generated(case: schemathesis.Case) -> None:
                check_response(case, api_url, session)

            try:
                generated()
            except Unsatisfiable:
                # An operation without parameters or body has no invalid request to make.
                if mode is not GenerationMode.NEGATIVE:
                    raise
                nothing_to_break.append(operation.label)
    assert sorted(operation.label for operation in operations) == [
        "GET /agents",
        "GET /healthz",
        "GET /readyz",
        "GET /status/{session_id}",
        "GET /stream/{stream_id}",
        "POST /interrupt/{session_id}",
        "POST /resume/{session_id}",
        "POST /start",
    ]
    assert nothing_to_break == ["GET /agents", "GET /healthz", "GET /readyz"]


@pytest.mark.parametrize("path", ["/start", "/interrupt/x1", "/resume/x1"])
def test_a_body_that_is_not_utf8_is_a_422(api_url: str, path: str) -> None:
    with httpx.Client(base_url=api_url, timeout=5, trust_env=False) as client:
        response = client.post(
            path, content=b"\xff\xfe{", headers={"content-type": "application/json"}
        )
    assert (response.status_code, response.json()["error"]["code"]) == (422, "invalid_request")
