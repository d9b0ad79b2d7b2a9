# One target per task. `make run` and `make test` do all set-up on a fresh machine.
VENV ?= .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: install run test check lint format typecheck bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

run: install
	$(VENV)/bin/uvicorn app.main:app --host $(HOST) --port $(PORT)

# Lint, type-check, then the whole suite (PostgreSQL tests included; required when CI is set).
test: install lint typecheck
	$(PY) -m pytest --cov --cov-report=term --cov-fail-under=85

lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: install
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

typecheck: install
	$(PY) -m mypy

bench: install
	$(PY) bench/peer_tree.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .coverage data
