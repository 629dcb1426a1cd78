"""The cluster policy: versions of the policy document; queues get cohorts and quotas per flavor.

A queue's single ``gpu_quota`` becomes ``quota``, GPUs per flavor: N becomes
``{"default": {"gpu": N}}`` (the implicit flavor of a policy that declares none); no quota stays
none. When queues exist, the policy they amount to is written down as version 1, so that the
first policy applied later knows which queues it keeps, changes or removes.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

from __future__ import annotations

import time
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

DEFAULT_FLAVOR = "default"  # kiban.scheduler.snapshot.DEFAULT_FLAVOR, as of this revision

queues = sa.table(
    "queues",
    sa.column("name", sa.String()),
    sa.column("tenant", sa.String()),
    sa.column("strategy", sa.String()),
    sa.column("gpu_quota", sa.Integer()),
    sa.column("quota", sa.JSON(none_as_null=True)),
    sa.column("borrowing_limit", sa.JSON()),
    sa.column("lending_limit", sa.JSON()),
    sa.column("fair_share_weight", sa.Float()),
)
policy_versions = sa.table(
    "policy_versions",
    sa.column("version", sa.Integer()),
    sa.column("document", sa.JSON()),
    sa.column("created_at", sa.Float()),
    sa.column("created_by", sa.String()),
)


def upgrade() -> None:
    op.create_table(
        "policy_versions",
        sa.Column("version", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("document", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("created_by", sa.String(length=128), nullable=False),
        sa.PrimaryKeyConstraint("version"),
    )
    with op.batch_alter_table("queues", schema=None) as batch_op:
        batch_op.add_column(sa.Column("cohort", sa.String(length=63), nullable=True))
        batch_op.add_column(sa.Column("quota", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("borrowing_limit", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("lending_limit", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("fair_share_weight", sa.Float(), nullable=True))

    connection = op.get_bind()
    rows = connection.execute(
        sa.select(queues.c.name, queues.c.tenant, queues.c.strategy, queues.c.gpu_quota).order_by(
            queues.c.name
        )
    ).all()
    declared: list[dict[str, Any]] = []
    for name, tenant, strategy, gpu_quota in rows:
        quota = None if gpu_quota is None else {DEFAULT_FLAVOR: {"gpu": gpu_quota}}
        connection.execute(
            queues.update()
            .where(queues.c.name == name)
            .values(quota=quota, borrowing_limit={}, lending_limit={}, fair_share_weight=1.0)
        )
        entry: dict[str, Any] = {"name": name, "tenant": tenant, "strategy": strategy}
        if gpu_quota is not None:
            entry["quota"] = {"gpu": gpu_quota}
        declared.append(entry)
    if declared:
        connection.execute(
            policy_versions.insert().values(
                version=1,
                document={"queues": declared},
                created_at=time.time(),
                created_by="migration 0004 (the queues as they were)",
            )
        )

    with op.batch_alter_table("queues", schema=None) as batch_op:
        batch_op.alter_column("borrowing_limit", existing_type=sa.JSON(), nullable=False)
        batch_op.alter_column("lending_limit", existing_type=sa.JSON(), nullable=False)
        batch_op.alter_column("fair_share_weight", existing_type=sa.Float(), nullable=False)
        batch_op.drop_column("gpu_quota")


def downgrade() -> None:
    with op.batch_alter_table("queues", schema=None) as batch_op:
        batch_op.add_column(sa.Column("gpu_quota", sa.Integer(), nullable=True))
    connection = op.get_bind()
    for name, quota in connection.execute(sa.select(queues.c.name, queues.c.quota)).all():
        if quota is not None:
            total = sum(int(amount.get("gpu", 0)) for amount in quota.values())
            connection.execute(queues.update().where(queues.c.name == name).values(gpu_quota=total))
    with op.batch_alter_table("queues", schema=None) as batch_op:
        batch_op.drop_column("fair_share_weight")
        batch_op.drop_column("lending_limit")
        batch_op.drop_column("borrowing_limit")
        batch_op.drop_column("quota")
        batch_op.drop_column("cohort")
    op.drop_table("policy_versions")
