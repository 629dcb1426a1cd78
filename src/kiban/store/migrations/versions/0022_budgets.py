"""Budgets: extensions granted by admins, and the thresholds each budget has reached.

Revision ID: 0022_budgets
Revises: 0021a_usage_open_once
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022_budgets"
down_revision = "0021a_usage_open_once"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "budget_extensions",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("budget", sa.String(128), nullable=False),
        sa.Column("unit", sa.String(16), nullable=False),
        sa.Column("amount", sa.Float(), nullable=False),
        sa.Column("granted_at", sa.Float(), nullable=False),
        sa.Column("until", sa.Float(), nullable=False),
        sa.Column("granted_by", sa.String(128), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
    )
    op.create_index("ix_budget_extensions_budget", "budget_extensions", ["budget"])
    op.create_table(
        "budget_marks",
        sa.Column("budget", sa.String(128), primary_key=True),
        sa.Column("period_start", sa.Float(), primary_key=True),
        sa.Column("mark", sa.String(16), primary_key=True),
        sa.Column("at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("budget_marks")
    op.drop_index("ix_budget_extensions_budget", "budget_extensions")
    op.drop_table("budget_extensions")
