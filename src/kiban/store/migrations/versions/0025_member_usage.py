"""Fair share per member within a tenant: each member's decayed and undecayed usage.

Revision ID: 0025_member_usage
Revises: 0024_audit_log
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025_member_usage"
down_revision = "0024_audit_log"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "member_usage",
        sa.Column("tenant", sa.String(63), primary_key=True),
        sa.Column("member", sa.String(128), primary_key=True),
        sa.Column("usage", sa.Float(), nullable=False),
        sa.Column("raw_usage", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("member_usage")
