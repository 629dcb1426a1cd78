"""Run-time estimates: the recent finished runs the estimator learns from, and on each job
whether its forecast start rests on estimated run times.

Revision ID: 0021_runtime_estimates
Revises: 0020_usage_records
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021_runtime_estimates"
down_revision = "0020_usage_records"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runtime_observations",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.String(80), nullable=False),
        sa.Column("tenant", sa.String(63), nullable=False),
        sa.Column("member", sa.String(128), nullable=True),
        sa.Column("name", sa.String(63), nullable=True),
        sa.Column("command", sa.String(32), nullable=True),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("queue", sa.String(63), nullable=False),
        sa.Column("runtime_s", sa.Float(), nullable=False),
        sa.Column("finished_at", sa.Float(), nullable=False),
    )
    # Added in place, as 0016 and 0019 do: a batch copy of ``jobs`` would drop its replicas.
    op.add_column("jobs", sa.Column("eta_estimated", sa.Boolean(), nullable=True))


def downgrade() -> None:
    op.execute("ALTER TABLE jobs DROP COLUMN eta_estimated")
    op.drop_table("runtime_observations")
