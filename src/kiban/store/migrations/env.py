"""Alembic environment: runs migrations on the connection kiban hands over."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from kiban.store.schema import metadata

config = context.config
connection: Connection | None = config.attributes.get("connection")
if connection is None:
    raise RuntimeError("kiban runs its migrations through kiban.store.db.migrate()")

context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
