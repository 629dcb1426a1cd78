"""Persistent state: SQLAlchemy models, engine set-up and Alembic migrations."""
