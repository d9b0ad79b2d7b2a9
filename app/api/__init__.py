"""The HTTP API: `create_app`, its routes, error translation and middleware."""

from app.api.app import create_app, load_registry

__all__ = ["create_app", "load_registry"]
