"""Nodes a job must keep off for a while (a node that failed the job's preflight check), and
the results of allreduce sweeps per node and topology block.

``jobs.excluded_nodes`` is added in place: a batch copy of ``jobs`` would drop its replicas
with it (ON DELETE CASCADE).

Revision ID: 0016_excluded_nodes
Revises: 0015_node_health
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016_excluded_nodes"
down_revision = "0015_node_health"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("excluded_nodes", sa.JSON(), nullable=True))
    op.create_table(
        "allreduce_results",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.String(80), nullable=False),
        sa.Column("scope", sa.String(8), nullable=False),
        sa.Column("name", sa.String(253), nullable=False),
        sa.Column("nodes", sa.JSON(), nullable=False),
        sa.Column("busbw_gbps", sa.Float(), nullable=False),
        sa.Column("baseline_gbps", sa.Float(), nullable=False),
        sa.Column("fraction", sa.Float(), nullable=False),
        sa.Column("degraded", sa.Boolean(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
    )
    op.create_index("ix_allreduce_results_name", "allreduce_results", ["scope", "name", "id"])
    op.create_index("ix_allreduce_results_job", "allreduce_results", ["job_id"])


def downgrade() -> None:
    op.drop_index("ix_allreduce_results_job", "allreduce_results")
    op.drop_index("ix_allreduce_results_name", "allreduce_results")
    op.drop_table("allreduce_results")
    # ALTER TABLE in place, as 0014 does: a batch copy would drop the jobs' replicas.
    op.execute("ALTER TABLE jobs DROP COLUMN excluded_nodes")
