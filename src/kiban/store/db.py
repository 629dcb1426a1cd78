"""Engines for the store: SQLite (WAL) under the kiban home by default, or PostgreSQL by URL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

MIGRATIONS = Path(__file__).parent / "migrations"


def default_url(home: Path) -> str:
    """The embedded store: a SQLite file in the kiban home."""
    return f"sqlite:///{home / 'kiban.db'}"


def make_engine(url: str) -> Engine:
    """An engine tuned for the backend: WAL and a busy timeout on SQLite, a pool on PostgreSQL."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": 30},
            pool_size=20,
            max_overflow=20,
        )

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.close()

        return engine
    if parsed.get_backend_name() == "postgresql":
        return create_engine(url, pool_size=20, max_overflow=20, pool_pre_ping=True)
    raise ValueError(
        f"unsupported database {parsed.get_backend_name()!r}: use sqlite or postgresql"
    )


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest Alembic revision (creates it on an empty database)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)
