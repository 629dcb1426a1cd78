"""Roles and token lifetimes: when a token expires, when it was last used, who made it; a
tenant's deletion time.

A token's member is its existing ``name``; its ``role`` column takes the roles of
``kiban.domain.roles.Role`` (``admin``, ``tenant-admin``, ``member``, ``viewer``, ``job``), the
old tokens' ``admin``/``member``/``job`` among them. A deleted tenant keeps its row (its
finished jobs and usage name it) with ``deleted_at`` set.

Revision ID: 0023_token_roles
Revises: 0022_budgets
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023_token_roles"
down_revision = "0022_budgets"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("api_tokens", sa.Column("expires_at", sa.Float(), nullable=True))
    op.add_column("api_tokens", sa.Column("last_used_at", sa.Float(), nullable=True))
    op.add_column("api_tokens", sa.Column("created_by", sa.String(128), nullable=True))
    op.add_column("tenants", sa.Column("deleted_at", sa.Float(), nullable=True))


def downgrade() -> None:
    # ALTER TABLE in place (SQLite 3.35 and later, PostgreSQL): a batch copy of a table drops
    # the old one, and what references it with it.
    op.execute("ALTER TABLE tenants DROP COLUMN deleted_at")
    for column in ("created_by", "last_used_at", "expires_at"):
        op.execute(f"ALTER TABLE api_tokens DROP COLUMN {column}")
