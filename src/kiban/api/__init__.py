"""The HTTP API (FastAPI): the only way into the platform."""
