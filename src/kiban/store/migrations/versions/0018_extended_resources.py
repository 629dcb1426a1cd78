"""The extended resources a node advertises (``nvidia.com/hostdev``, ``hugepages-2Mi``, MIG
slices), as the executor reports them: ``{name: amount}``, hugepages in bytes.

Revision ID: 0018_extended_resources
Revises: 0017_notebooks
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018_extended_resources"
down_revision = "0017_notebooks"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "nodes", sa.Column("extended", sa.JSON(), nullable=False, server_default=sa.text("'{}'"))
    )


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("extended")
