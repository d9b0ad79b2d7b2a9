# One target per task. `make run` and `make test` do all set-up on a fresh machine.
VENV ?= .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: install run test check lint format typecheck bench clean browser

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

run: install
	$(VENV)/bin/uvicorn app.main:app --host $(HOST) --port $(PORT)

# Lint, type-check, then the whole suite (PostgreSQL tests included; required when CI is set).
test: install lint typecheck browser
	$(PY) -m pytest --cov --cov-report=term --cov-fail-under=85

# The browser test drives Debian's Chromium: install it when it is missing and apt-get can (as
# root, or through sudo without a password). When it cannot, the test skips, and fails under CI.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then sudo=; else sudo="sudo -n"; fi; \
	  if command -v apt-get >/dev/null 2>&1 && $$sudo true 2>/dev/null; then \
	    echo "Installing chromium for the browser test"; \
	    $$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	    $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null || \
	    echo "Could not install chromium: the browser test will skip (and fail under CI)"; \
	  else \
	    echo "chromium is missing and apt-get is not usable: the browser test will skip (and fail under CI)"; \
	  fi; \
	}

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
