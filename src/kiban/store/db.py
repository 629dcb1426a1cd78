"""Engines for the store: SQLite (WAL) under the kiban home by default, or PostgreSQL by URL."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

MIGRATIONS = Path(__file__).parent / "migrations"

REQUEST_THREADS = 8
"""Worker threads the API runs its store work on (anyio's limiter is set to this). Few: the
work is mostly Python, which runs one thread at a time, and each thread running it keeps the
event loop (every request's I/O) waiting that much longer for the GIL: measured on 2 cores,
with a 1 ms switch interval, an event loop's p50 lag was 13 ms beside 4 busy threads and 33
beside 16 (with the default 5 ms, 21 and 119)."""


@dataclass(frozen=True)
class PoolSize:
    """How many connections one engine keeps, may add, and how long a checkout may wait."""

    size: int
    overflow: int
    timeout_s: float


REQUEST_POOL = PoolSize(size=REQUEST_THREADS, overflow=REQUEST_THREADS, timeout_s=10.0)
"""The API's engine: a connection for every worker thread, and as many again for the few
calls that open a second session while they hold one (a policy change reloads the policy), so a
thread never waits on another for a connection; a request that waits for one anyway (the
router's token checks share the pool) gets a 503 after ``timeout_s`` rather than hanging."""
CONTROL_POOL = PoolSize(size=4, overflow=4, timeout_s=30.0)
"""The control loop's, the service controller's and the submission writer's engine: requests
cannot take its connections, so a burst of them never stalls scheduling."""


def default_url(home: Path) -> str:
    """The embedded store: a SQLite file in the kiban home."""
    return f"sqlite:///{home / 'kiban.db'}"


def make_engine(url: str, pool: PoolSize = REQUEST_POOL) -> Engine:
    """An engine tuned for the backend: WAL and a busy timeout on SQLite, a pool on PostgreSQL."""
    parsed = make_url(url)
    sizes: dict[str, Any] = {
        "pool_size": pool.size,
        "max_overflow": pool.overflow,
        "pool_timeout": pool.timeout_s,
    }
    if parsed.get_backend_name() == "sqlite":
        engine = create_engine(
            url, connect_args={"check_same_thread": False, "timeout": 30}, **sizes
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
        return create_engine(url, pool_pre_ping=True, **sizes)
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
