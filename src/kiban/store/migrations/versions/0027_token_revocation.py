"""Revoked tokens are kept, as rows with ``revoked_at`` and ``revoked_by`` (issue 27): who had
access stays listed (``kiban admin tokens --all``) and the members named by the audit trail
keep their token. Authentication refuses a revoked row.

Downgrading deletes the revoked rows first: without the columns they would be valid again.

Revision ID: 0027_token_revocation
Revises: 0026_drop_pid_start_time
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0027_token_revocation"
down_revision = "0026_drop_pid_start_time"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("api_tokens", sa.Column("revoked_at", sa.Float(), nullable=True))
    op.add_column("api_tokens", sa.Column("revoked_by", sa.String(128), nullable=True))


def downgrade() -> None:
    op.execute("DELETE FROM api_tokens WHERE revoked_at IS NOT NULL")
    # ALTER TABLE in place (SQLite 3.35 and later, PostgreSQL), as 0023 does
    for column in ("revoked_by", "revoked_at"):
        op.execute(f"ALTER TABLE api_tokens DROP COLUMN {column}")
