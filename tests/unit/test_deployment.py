"""The deployment files, checked by reading them (no Docker engine here): the lock covers what
the server needs, the image installs from it, compose keeps secrets and server ids out."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]


def locked() -> dict[str, str]:
    """Package -> version pinned in requirements.lock, each pin followed by its hashes."""
    text = (ROOT / "requirements.lock").read_text()
    pins = re.findall(r"^([A-Za-z0-9_.-]+)==([^\s;]+)", text, flags=re.MULTILINE)
    blocks = re.split(r"^(?=[A-Za-z0-9_.-]+==)", text, flags=re.MULTILINE)[1:]
    assert all("--hash=sha256:" in block for block in blocks), "a pin without hashes"
    return {canonicalize_name(name): version for name, version in pins}


def project() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_the_lock_pins_every_serving_dependency_at_an_allowed_version() -> None:
    pins = locked()
    for line in project()["dependencies"]:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is not in requirements.lock: run `make lock`"
        assert requirement.specifier.contains(pins[name], prereleases=True), (line, pins[name])
    # Extras are locked too: uvicorn[standard], sqlalchemy[asyncio].
    assert {"uvloop", "httptools", "greenlet"} <= set(pins)


def test_the_lock_holds_no_development_tool() -> None:
    pins = locked()
    for line in project()["optional-dependencies"]["dev"]:
        assert canonicalize_name(Requirement(line).name) not in pins


def test_the_image_installs_the_lock_and_checks_readiness() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "pip install --require-hashes -r requirements.lock" in dockerfile
    assert "pip install --no-deps ." in dockerfile
    assert "/readyz" in dockerfile.partition("HEALTHCHECK")[2]
    assert dockerfile.rstrip().endswith('CMD ["agent-server"]')
    assert project()["scripts"]["agent-server"] == "app.serve:main"
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".git", ".venv", "data", "tests"} <= set(ignored)


def test_compose_takes_secrets_from_the_environment_and_fixes_no_server_id() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    server = compose["services"]["server"]["environment"]
    postgres = compose["services"]["postgres"]["environment"]
    assert "SERVER_ID" not in server
    assert server["API_KEY"].startswith("${API_KEY")
    assert postgres["POSTGRES_PASSWORD"].startswith("${POSTGRES_PASSWORD")
    assert "${POSTGRES_PASSWORD" in server["DATABASE_URL"]
    assert server["DATABASE_URL"].startswith("postgresql://")
    # Replicas (--scale) each take a port of the range.
    assert compose["services"]["server"]["ports"][0].endswith("-8009}:8000")


def test_make_run_installs_no_development_tool() -> None:
    makefile = (ROOT / "Makefile").read_text()
    serve_install = makefile.partition("$(VENV)/.installed-serve:")[2].partition("\n\n")[0]
    assert "requirements.lock" in serve_install
    assert "[dev]" not in serve_install
    assert re.search(r"^run: install-serve$", makefile, flags=re.MULTILINE)
