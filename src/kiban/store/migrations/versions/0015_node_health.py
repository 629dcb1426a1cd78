"""Node health: the checks' conditions with their history, the latest readings, remediation
actions, and on nodes who cordoned them and where their agent is.

Revision ID: 0015_node_health
Revises: 0014_job_replicas
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015_node_health"
down_revision = "0014_job_replicas"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Columns added in place (a batch copy of nodes is not needed and not wanted).
    op.add_column(
        "nodes", sa.Column("cordon_source", sa.String(16), server_default="", nullable=False)
    )
    op.add_column(
        "nodes", sa.Column("agent_address", sa.String(255), server_default="", nullable=False)
    )
    op.add_column("nodes", sa.Column("agent_reported_at", sa.Float(), nullable=True))
    # Nodes cordoned before this revision were cordoned by an admin.
    op.execute("UPDATE nodes SET cordon_source = 'admin' WHERE cordoned")
    op.create_table(
        "node_conditions",
        sa.Column("node", sa.String(253), primary_key=True),
        sa.Column("type", sa.String(32), primary_key=True),
        sa.Column("status", sa.String(8), nullable=False),
        sa.Column("reason", sa.String(128), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("last_transition_time", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.Column("streak", sa.Integer(), nullable=False),
    )
    op.create_table(
        "node_condition_changes",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("node", sa.String(253), nullable=False),
        sa.Column("type", sa.String(32), nullable=False),
        sa.Column("status", sa.String(8), nullable=False),
        sa.Column("reason", sa.String(128), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
    )
    op.create_index("ix_node_condition_changes_node", "node_condition_changes", ["node", "id"])
    op.create_table(
        "node_readings",
        sa.Column("node", sa.String(253), primary_key=True),
        sa.Column("taken_at", sa.Float(), nullable=False),
        sa.Column("reading", sa.JSON(), nullable=False),
    )
    op.create_table(
        "remediation_actions",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("node", sa.String(253), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("check", sa.String(32), nullable=False),
        sa.Column("rule", sa.String(128), nullable=False),
        sa.Column("reading", sa.Text(), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
    )
    op.create_index("ix_remediation_actions_node", "remediation_actions", ["node", "id"])


def downgrade() -> None:
    op.drop_index("ix_remediation_actions_node", "remediation_actions")
    op.drop_table("remediation_actions")
    op.drop_table("node_readings")
    op.drop_index("ix_node_condition_changes_node", "node_condition_changes")
    op.drop_table("node_condition_changes")
    op.drop_table("node_conditions")
    op.execute("ALTER TABLE nodes DROP COLUMN agent_reported_at")
    op.execute("ALTER TABLE nodes DROP COLUMN agent_address")
    op.execute("ALTER TABLE nodes DROP COLUMN cordon_source")
