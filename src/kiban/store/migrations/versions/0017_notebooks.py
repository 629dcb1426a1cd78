"""Notebooks: one row per (tenant, name) notebook, and the key Jupyter tokens derive from.

Revision ID: 0017_notebooks
Revises: 0016_excluded_nodes
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017_notebooks"
down_revision = "0016_excluded_nodes"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "notebooks",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("tenant", sa.String(63), sa.ForeignKey("tenants.name"), nullable=False),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("owner", sa.String(128), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("job_id", sa.String(80), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("ready_at", sa.Float(), nullable=True),
        sa.Column("last_activity", sa.Float(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
    )
    op.create_index("ux_notebooks_tenant_name", "notebooks", ["tenant", "name"], unique=True)
    op.create_table(
        "notebook_keys",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("key", sa.String(128), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("notebook_keys")
    op.drop_index("ux_notebooks_tenant_name", "notebooks")
    op.drop_table("notebooks")
