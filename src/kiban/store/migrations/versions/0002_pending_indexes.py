"""Partial indexes for the scheduling pass: each queue's pending jobs in order, new arrivals.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

PENDING = sa.text("state = 'Pending'")
UNEXPLAINED = sa.text("state = 'Pending' AND reason_code IS NULL")


def upgrade() -> None:
    op.create_index(
        "ix_jobs_pending_order",
        "jobs",
        ["queue", sa.text("priority DESC"), "submitted_at", "id"],
        sqlite_where=PENDING,
        postgresql_where=PENDING,
    )
    op.create_index(
        "ix_jobs_pending_unexplained",
        "jobs",
        ["id"],
        sqlite_where=UNEXPLAINED,
        postgresql_where=UNEXPLAINED,
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_pending_unexplained", table_name="jobs")
    op.drop_index("ix_jobs_pending_order", table_name="jobs")
