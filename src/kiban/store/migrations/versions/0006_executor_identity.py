"""Executor identity of replicas (a pod's handle beside a process's pid), and what the executor
reports of nodes beyond their capacity: GPUs held by others, and why a node takes no new work.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("replicas", schema=None) as batch_op:
        batch_op.add_column(sa.Column("handle", sa.String(length=512), nullable=True))
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("gpus_used_elsewhere", sa.Integer(), nullable=False, server_default="0")
        )
        batch_op.add_column(
            sa.Column("unschedulable_reason", sa.Text(), nullable=False, server_default="")
        )


def downgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_column("unschedulable_reason")
        batch_op.drop_column("gpus_used_elsewhere")
    with op.batch_alter_table("replicas", schema=None) as batch_op:
        batch_op.drop_column("handle")
