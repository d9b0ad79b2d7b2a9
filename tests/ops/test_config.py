"""Configuration mistakes: one clear line and a non-zero exit, never a traceback; the database
URLs platforms hand out are accepted."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from app.serve import check, prepare_metrics
from app.settings import Settings, normalise_database_url
from tests.databases import POSTGRES_URL, postgres_database
from tests.e2e.conftest import ROOT, free_port, server_env

pytestmark = pytest.mark.slow


def run(command: list[str], **env: str) -> tuple[int, list[str]]:
    """Run a server command that must fail at start; its exit code and output lines."""
    environment = server_env("sqlite+aiosqlite:///unused.db", **env)
    result = subprocess.run(
        command,
        cwd=ROOT,
        env=environment,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return result.returncode, (result.stdout + result.stderr).splitlines()


def uvicorn() -> list[str]:
    return [sys.executable, "-m", "uvicorn", "app.main:app", "--port", str(free_port())]


def serve() -> list[str]:
    return [sys.executable, "-m", "app.serve", "--host", "127.0.0.1", "--port", str(free_port())]


MISTAKES = {
    "unsupported DATABASE_URL": (
        {"DATABASE_URL": "mysql://db/agents"},
        "agent-server: Invalid configuration: DATABASE_URL: unsupported database URL scheme "
        "'mysql': use postgresql://user:password@host/db (or postgres://, postgresql+asyncpg://), "
        "sqlite+aiosqlite:///path/to/file.db or memory://",
    ),
    "MODEL_* without MODEL_NAME": (
        {"MODEL_BASE_URL": "http://127.0.0.1:9/v1", "AGENT_MODULE": "app.demo:registry"},
        "agent-server: Invalid configuration: MODEL_NAME must name the model when "
        "MODEL_BASE_URL or MODEL_API_KEY is set",
    ),
}


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
@pytest.mark.parametrize("command", [uvicorn, serve])
def test_a_configuration_mistake_is_one_line(mistake: str, command: object) -> None:
    env, line = MISTAKES[mistake]
    code, lines = run(command(), **env)  # type: ignore[operator]
    assert (code, lines) == (3, [line])


async def test_a_missing_database_is_one_line_from_the_server_command() -> None:
    async with postgres_database() as url:
        missing = make_url(url).set(database="no_such_database")
        plain = missing.set(drivername="postgresql").render_as_string(hide_password=False)
        code, lines = await asyncio.to_thread(run, serve(), DATABASE_URL=plain)
    shown = missing.render_as_string(hide_password=True)
    assert code == 3
    assert lines == [
        "agent-server: Cannot start: Could not migrate the database: InvalidCatalogNameError: "
        f'database "no_such_database" does not exist (DATABASE_URL {shown})'
    ]


async def test_a_missing_database_under_uvicorn_is_one_line_and_no_traceback() -> None:
    async with postgres_database() as url:
        missing = make_url(url).set(database="no_such_database")
        plain = missing.set(drivername="postgresql").render_as_string(hide_password=False)
        code, lines = await asyncio.to_thread(run, uvicorn(), DATABASE_URL=plain)
    shown = missing.render_as_string(hide_password=True)
    assert code == 3
    errors = [line for line in lines if line.startswith("ERROR:")]
    assert errors == [
        "ERROR:    Cannot start: Could not migrate the database: InvalidCatalogNameError: "
        f'database "no_such_database" does not exist (DATABASE_URL {shown})',
        "ERROR:    Application startup failed. Exiting.",
    ]
    assert not any("Traceback" in line for line in lines)


def test_json_format_applies_to_the_one_line() -> None:
    code, lines = run(serve(), DATABASE_URL="mysql://db/agents", LOG_FORMAT="json")
    assert code == 3
    [line] = lines
    assert line.startswith('{"time":')
    assert '"level":"CRITICAL"' in line


@pytest.mark.parametrize(
    ("given", "taken"),
    [
        ("postgres://u:p@db:5432/agents", "postgresql+asyncpg://u:p@db:5432/agents"),
        ("postgresql://u@db/agents", "postgresql+asyncpg://u@db/agents"),
        ("postgres://u:p@db/a?sslmode=require", "postgresql+asyncpg://u:p@db/a?ssl=require"),
        ("postgresql+asyncpg://u@db/agents", "postgresql+asyncpg://u@db/agents"),
        ("sqlite:///./data/x.db", "sqlite+aiosqlite:///./data/x.db"),
        ("sqlite+aiosqlite:///./data/x.db", "sqlite+aiosqlite:///./data/x.db"),
        ("memory://", "memory://"),
    ],
)
def test_database_urls_platforms_hand_out_are_accepted(given: str, taken: str) -> None:
    assert normalise_database_url(given) == taken
    assert Settings(database_url=given).database_url == taken


def test_the_test_database_url_is_kept_as_given() -> None:
    assert normalise_database_url(POSTGRES_URL) == POSTGRES_URL


def test_log_settings_take_any_case() -> None:
    settings = Settings(log_format="JSON", log_level="debug")  # type: ignore[arg-type]
    assert (settings.log_format, settings.log_level) == ("json", "DEBUG")


def test_several_workers_on_a_memory_store_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        check(Settings(database_url="memory://"), workers=2)
    assert exited.value.code == 3
    assert capsys.readouterr().err.splitlines() == [
        "agent-server: Invalid configuration: WEB_CONCURRENCY=2 needs a database the workers "
        "share (PostgreSQL): each would have its own memory:// store"
    ]


def test_several_workers_get_an_empty_metrics_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "metrics"
    folder.mkdir()
    (folder / "counter_123.db").write_bytes(b"left by an earlier server")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(folder))
    prepare_metrics(2)
    assert list(folder.iterdir()) == []
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR")
    prepare_metrics(1)  # one worker, no folder asked for: the process's own registry
    assert "PROMETHEUS_MULTIPROC_DIR" not in os.environ
    prepare_metrics(2)
    made = Path(os.environ.pop("PROMETHEUS_MULTIPROC_DIR"))
    assert made.is_dir()
    assert list(made.iterdir()) == []
    made.rmdir()
