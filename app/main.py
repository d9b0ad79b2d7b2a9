"""The ready ASGI app, configured from the environment: `uvicorn app.main:app`."""

from app.serve import build_app

app = build_app()
