"""The ready ASGI app, configured from the environment: `uvicorn app.main:app`."""

from app.api import create_app, load_registry
from app.settings import Settings

settings = Settings()
app = create_app(load_registry(settings.agent_module), settings=settings)
