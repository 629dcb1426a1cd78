"""Inference services, their revisions, and the jobs that run their replicas.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "services",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("tenant", sa.String(length=63), sa.ForeignKey("tenants.name"), nullable=False),
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("document", sa.JSON(), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.Column("revisions_made", sa.Integer(), nullable=False),
        sa.Column("stable_revision", sa.Integer(), nullable=True),
        sa.Column("canary_revision", sa.Integer(), nullable=True),
        sa.Column("canary_percent", sa.Integer(), nullable=False),
        sa.Column("deleted_at", sa.Float(), nullable=True),
    )
    op.create_index("ux_services_tenant_name", "services", ["tenant", "name"], unique=True)
    op.create_table(
        "service_revisions",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column(
            "service_id",
            sa.Integer(),
            sa.ForeignKey("services.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("template_key", sa.String(length=64), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("ready_at", sa.Float(), nullable=True),
        sa.Column("desired_replicas", sa.Integer(), nullable=False),
        sa.Column("crashes", sa.Integer(), nullable=False),
    )
    op.create_index(
        "ix_service_revisions_service_id", "service_revisions", ["service_id"], unique=False
    )
    op.create_table(
        "service_replicas",
        sa.Column(
            "job_id",
            sa.String(length=80),
            sa.ForeignKey("jobs.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column(
            "service_id",
            sa.Integer(),
            sa.ForeignKey("services.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column(
            "revision_id",
            sa.Integer(),
            sa.ForeignKey("service_revisions.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("ready", sa.Boolean(), nullable=False),
        sa.Column("ever_ready", sa.Boolean(), nullable=False),
        sa.Column("ended", sa.Boolean(), nullable=False),
    )
    op.create_index(
        "ix_service_replicas_service_id", "service_replicas", ["service_id"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_service_replicas_service_id", table_name="service_replicas")
    op.drop_table("service_replicas")
    op.drop_index("ix_service_revisions_service_id", table_name="service_revisions")
    op.drop_table("service_revisions")
    op.drop_index("ux_services_tenant_name", table_name="services")
    op.drop_table("services")
