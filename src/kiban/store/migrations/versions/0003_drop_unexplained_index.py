"""Drop the index of pending jobs with no reason: the backlog reason is now given at read time.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_jobs_pending_unexplained", table_name="jobs")


def downgrade() -> None:
    unexplained = sa.text("state = 'Pending' AND reason_code IS NULL")
    op.create_index(
        "ix_jobs_pending_unexplained",
        "jobs",
        ["id"],
        sqlite_where=unexplained,
        postgresql_where=unexplained,
    )
