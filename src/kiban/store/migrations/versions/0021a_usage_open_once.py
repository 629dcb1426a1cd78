"""Usage records: at most one open record per job (a partial unique index), an attempt may have
more than one record (a launch cut short by a restart is re-run under its attempt number), and
each record knows when the job's previous one ended (``previous_ended_at``), so a report counts
a window's jobs without a DISTINCT over a million rows.

Revision ID: 0021a_usage_open_once
Revises: 0021_runtime_estimates
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021a_usage_open_once"
down_revision = "0021_runtime_estimates"
branch_labels = None
depends_on = None

_OPEN = sa.text("ended_at IS NULL")


def upgrade() -> None:
    op.add_column("usage_records", sa.Column("previous_ended_at", sa.Float(), nullable=True))
    op.drop_index("ix_usage_records_attempt", "usage_records")
    op.create_index("ix_usage_records_attempt", "usage_records", ["kind", "job_id", "attempt"])
    op.create_index(
        "ix_usage_records_one_open",
        "usage_records",
        ["job_id"],
        unique=True,
        sqlite_where=_OPEN,
        postgresql_where=_OPEN,
    )


def downgrade() -> None:
    op.drop_index("ix_usage_records_one_open", "usage_records")
    op.drop_index("ix_usage_records_attempt", "usage_records")
    op.create_index(
        "ix_usage_records_attempt", "usage_records", ["kind", "job_id", "attempt"], unique=True
    )
    op.drop_column("usage_records", "previous_ended_at")
