"""Replicas lose ``pid_start_time``: nothing wrote or read it since the local executor keeps
a replica's process start time in its handle (issue 22).

Revision ID: 0026_drop_pid_start_time
Revises: 0025_member_usage
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0026_drop_pid_start_time"
down_revision = "0025_member_usage"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("replicas", schema=None) as batch_op:  # SQLite: table copied
        batch_op.drop_column("pid_start_time")


def downgrade() -> None:
    with op.batch_alter_table("replicas", schema=None) as batch_op:
        batch_op.add_column(sa.Column("pid_start_time", sa.Float(), nullable=True))
