"""Usage accounting: one undecayed record per job attempt and per service replica.

Revision ID: 0020_usage_records
Revises: 0019_job_arrays
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020_usage_records"
down_revision = "0019_job_arrays"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "usage_records",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("job_id", sa.String(80), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("tenant", sa.String(63), nullable=False),
        sa.Column("member", sa.String(128), nullable=True),
        sa.Column("queue", sa.String(63), nullable=False),
        sa.Column("flavor", sa.String(63), nullable=True),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("cpu_millis", sa.BigInteger(), nullable=False),
        sa.Column("memory", sa.BigInteger(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.Column("gpu_seconds", sa.Float(), nullable=True),
        sa.Column("outcome", sa.String(16), nullable=True),
    )
    op.create_index(
        "ix_usage_records_attempt", "usage_records", ["kind", "job_id", "attempt"], unique=True
    )
    op.create_index("ix_usage_records_tenant_started", "usage_records", ["tenant", "started_at"])
    op.create_index("ix_usage_records_started", "usage_records", ["started_at"])
    op.create_index("ix_usage_records_open", "usage_records", ["ended_at"])


def downgrade() -> None:
    for name in (
        "ix_usage_records_open",
        "ix_usage_records_started",
        "ix_usage_records_tenant_started",
        "ix_usage_records_attempt",
    ):
        op.drop_index(name, "usage_records")
    op.drop_table("usage_records")
