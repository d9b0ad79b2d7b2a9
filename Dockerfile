# Slim, non-root image. Dependencies come from requirements.lock (exact versions and hashes), so
# two builds of one commit install the same thing; the server command checks its configuration,
# migrates the database once, then serves with WEB_CONCURRENCY workers on port 8000.
FROM python:3.11-slim AS build
WORKDIR /src
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /venv
COPY requirements.lock ./
RUN /venv/bin/pip install --require-hashes -r requirements.lock
COPY pyproject.toml README.md ./
COPY app ./app
COPY migrations ./migrations
RUN /venv/bin/pip install --no-deps .

FROM python:3.11-slim
ENV PATH=/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    DATABASE_URL=sqlite+aiosqlite:////data/agent-server.db \
    HOST=0.0.0.0 \
    PORT=8000
RUN useradd --create-home --uid 10001 agent && mkdir /data && chown agent /data
COPY --from=build /venv /venv
WORKDIR /srv
# For migrating by hand: `docker compose run --rm server alembic upgrade head`.
COPY alembic.ini ./
COPY migrations ./migrations
USER agent
VOLUME ["/data"]
EXPOSE 8000
# Ready means the store answers, not only the process.
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(f\"http://127.0.0.1:{os.environ.get('PORT', '8000')}/readyz\", timeout=2)"]
# SIGTERM: streams end cleanly, runs are left to be taken over; SHUTDOWN_TIMEOUT bounds it
# (keep the orchestrator's stop grace period above it: compose's stop_grace_period).
STOPSIGNAL SIGTERM
CMD ["agent-server"]
