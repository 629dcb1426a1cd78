"""Each job's replicas in a column, set at submission beside its GPUs: jobs are shown without
parsing their manifests (rows stored before keep None, and their manifest is parsed instead).

Revision ID: 0014_job_replicas
Revises: 0013_stop_intents
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014_job_replicas"
down_revision = "0013_stop_intents"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("replicas", sa.Integer(), nullable=True))


def downgrade() -> None:
    # ALTER TABLE in place (SQLite 3.35 and later, PostgreSQL), as 0011 does for gpus: a batch
    # copy of the table would drop the old one, and its replicas with it (ON DELETE CASCADE).
    op.execute("ALTER TABLE jobs DROP COLUMN replicas")
