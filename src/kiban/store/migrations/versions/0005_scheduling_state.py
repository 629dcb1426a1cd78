"""Scheduling state: preemptor, last checkpoint, forecast start and cluster position of jobs;
tenants' decayed usage.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("preempted_by", sa.String(length=80), nullable=True))
        batch_op.add_column(sa.Column("nominated_nodes", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("last_checkpoint_at", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("eta", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("cluster_position", sa.Integer(), nullable=True))
    op.create_table(
        "tenant_usage",
        sa.Column("tenant", sa.String(length=63), nullable=False),
        sa.Column("usage", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["tenant"], ["tenants.name"]),
        sa.PrimaryKeyConstraint("tenant"),
    )


def downgrade() -> None:
    op.drop_table("tenant_usage")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("cluster_position")
        batch_op.drop_column("eta")
        batch_op.drop_column("last_checkpoint_at")
        batch_op.drop_column("nominated_nodes")
        batch_op.drop_column("preempted_by")
