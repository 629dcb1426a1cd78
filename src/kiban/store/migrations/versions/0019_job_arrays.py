"""Job arrays and dependencies: the arrays, the unresolved dependencies, and on each job its
array, its index and what holds it from the scheduler (the pending index leaves held jobs out).

Revision ID: 0019_job_arrays
Revises: 0018_extended_resources
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019_job_arrays"
down_revision = "0018_extended_resources"
branch_labels = None
depends_on = None

_PENDING_ORDER = ("queue", sa.text("priority DESC"), "submitted_at", "id")
_ARRAY_ROWS = sa.text("array_id IS NOT NULL")


def upgrade() -> None:
    # Added in place, as 0016 does: a batch copy of ``jobs`` would drop its replicas (ON
    # DELETE CASCADE) and the stop-intent triggers of 0013.
    op.add_column("jobs", sa.Column("array_id", sa.String(80), nullable=True))
    op.add_column("jobs", sa.Column("array_index", sa.Integer(), nullable=True))
    op.add_column("jobs", sa.Column("gate", sa.String(16), nullable=True))
    op.drop_index("ix_jobs_pending_order", "jobs")
    held_out = sa.text("state = 'Pending' AND gate IS NULL")
    op.create_index(
        "ix_jobs_pending_order",
        "jobs",
        list(_PENDING_ORDER),
        sqlite_where=held_out,
        postgresql_where=held_out,
    )
    op.create_index(
        "ix_jobs_array_state",
        "jobs",
        ["array_id", "state"],
        sqlite_where=_ARRAY_ROWS,
        postgresql_where=_ARRAY_ROWS,
    )
    op.create_index(
        "ix_jobs_array_gate",
        "jobs",
        ["array_id", "gate", "array_index"],
        sqlite_where=_ARRAY_ROWS,
        postgresql_where=_ARRAY_ROWS,
    )
    op.create_table(
        "job_arrays",
        sa.Column("id", sa.String(80), primary_key=True),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("tenant", sa.String(63), sa.ForeignKey("tenants.name"), nullable=False),
        sa.Column("queue", sa.String(63), nullable=False),
        sa.Column("indices", sa.Text(), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("parallelism", sa.Integer(), nullable=True),
        sa.Column("submitted_at", sa.Float(), nullable=False),
        sa.Column("submitted_by", sa.String(63), nullable=True),
        sa.Column("open", sa.Boolean(), nullable=False),
    )
    op.create_index("ix_job_arrays_tenant_submitted", "job_arrays", ["tenant", "submitted_at"])
    op.create_index(
        "ix_job_arrays_open",
        "job_arrays",
        ["open"],
        sqlite_where=sa.text("open"),
        postgresql_where=sa.text("open"),
    )
    op.create_table(
        "job_dependencies",
        sa.Column("dependent", sa.String(80), primary_key=True),
        sa.Column("target", sa.String(80), primary_key=True),
        sa.Column("dependent_is_array", sa.Boolean(), nullable=False),
        sa.Column("target_is_array", sa.Boolean(), nullable=False),
        sa.Column("condition", sa.String(16), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("job_dependencies")
    op.drop_index("ix_job_arrays_open", "job_arrays")
    op.drop_index("ix_job_arrays_tenant_submitted", "job_arrays")
    op.drop_table("job_arrays")
    op.drop_index("ix_jobs_array_gate", "jobs")
    op.drop_index("ix_jobs_array_state", "jobs")
    op.drop_index("ix_jobs_pending_order", "jobs")
    pending = sa.text("state = 'Pending'")
    op.create_index(
        "ix_jobs_pending_order",
        "jobs",
        list(_PENDING_ORDER),
        sqlite_where=pending,
        postgresql_where=pending,
    )
    for column in ("gate", "array_index", "array_id"):
        op.execute(f"ALTER TABLE jobs DROP COLUMN {column}")
