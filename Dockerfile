# Slim, non-root image: migrates the database, then serves the API on port 8000.
FROM python:3.11-slim AS build
WORKDIR /src
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY pyproject.toml README.md ./
COPY app ./app
COPY migrations ./migrations
RUN python -m venv /venv && /venv/bin/pip install .

FROM python:3.11-slim
ENV PATH=/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    DATABASE_URL=sqlite+aiosqlite:////data/agent-server.db
RUN useradd --create-home --uid 10001 agent && mkdir /data && chown agent /data
COPY --from=build /venv /venv
WORKDIR /srv
COPY alembic.ini ./
COPY migrations ./migrations
USER agent
VOLUME ["/data"]
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz')"
CMD ["sh", "-c", "alembic upgrade head && exec uvicorn app.main:app --host 0.0.0.0 --port 8000 --proxy-headers"]
