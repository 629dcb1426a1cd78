"""A job's own API token: the job it belongs to (revoked when the job ends).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.add_column(sa.Column("job_id", sa.String(length=64), nullable=True))
        batch_op.create_index(batch_op.f("ix_api_tokens_job_id"), ["job_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_api_tokens_job_id"))
        batch_op.drop_column("job_id")
