# One target per task. `make run` and `make test` do all set-up on a fresh machine.
VENV ?= .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: install install-serve run test check lint format typecheck bench faults clean browser js lock

# `make run` installs what serving needs, exactly as locked (requirements.lock, the image's
# too); `make install` (and so `make test`) adds the development tools on top.
install-serve: $(VENV)/.installed-serve
install: $(VENV)/.installed

$(VENV)/.installed-serve: requirements.lock pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --require-hashes -r requirements.lock
	$(PY) -m pip install --quiet --no-deps -e .
	touch $@

$(VENV)/.installed: $(VENV)/.installed-serve
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

# The server command: checks the configuration and the database, then serves with
# WEB_CONCURRENCY workers (see README, Operations).
run: install-serve
	$(PY) -m app.serve --host $(HOST) --port $(PORT)

# Re-lock the serving dependencies after changing them in pyproject.toml.
lock: install
	$(VENV)/bin/uv pip compile pyproject.toml --universal --python-version 3.11 \
	  --generate-hashes --quiet -o requirements.lock

# Lint, type-check, then the whole suite (PostgreSQL tests included; required when CI is set).
test: install lint typecheck browser js
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

# The official JavaScript clients (AI SDK, AG-UI) and playwright-core, pinned by the lock file.
js: tests/js/node_modules/.installed

tests/js/node_modules/.installed: tests/js/package.json tests/js/package-lock.json
	cd tests/js && npm ci --no-audit --no-fund --loglevel=error
	touch $@

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

# The fault-injection suite at scale: FAULT_SCENARIOS seeded scenarios per store (default
# 2,000) with their figures, then the process-level fault tests, the 30 s restarts included.
FAULT_SCENARIOS ?= 2000
faults: install
	@$(PY) bench/faults.py --scenarios $(FAULT_SCENARIOS); scenarios=$$?; \
	FAULT_LONG=1 $(PY) -m pytest tests/faults/test_processes.py tests/faults/test_cases.py; \
	cases=$$?; exit $$(( scenarios || cases ))

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .coverage data tests/js/node_modules
