"""Who submitted a job: the name of the token (``kiban cancel --mine``).

Jobs submitted before carry it only in their "Submitted" event's message ("submitted by NAME
to queue ..."), from which it is filled in.

Revision ID: 0012_submitted_by
Revises: 0011_backlog_indexes
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_submitted_by"
down_revision = "0011_backlog_indexes"
branch_labels = None
depends_on = None

PREFIX = "submitted by "  # kiban.services.jobs.prepare_submission's event message


def upgrade() -> None:
    op.add_column("jobs", sa.Column("submitted_by", sa.String(length=63), nullable=True))
    bind = op.get_bind()
    events = sa.table(
        "events",
        sa.column("object_kind", sa.String),
        sa.column("object_name", sa.String),
        sa.column("reason", sa.String),
        sa.column("message", sa.Text),
    )
    jobs = sa.table("jobs", sa.column("id", sa.String), sa.column("submitted_by", sa.String))
    submitted = bind.execute(
        sa.select(events.c.object_name, events.c.message).where(
            events.c.object_kind == "Job", events.c.reason == "Submitted"
        )
    )
    found = []
    for job_id, message in submitted:
        if not (message or "").startswith(PREFIX):
            continue
        by, sep, _ = message.removeprefix(PREFIX).partition(" to queue ")
        if sep and by and len(by) <= 63:
            found.append({"job": job_id, "by": by})
    if found:
        bind.execute(
            jobs.update()
            .where(jobs.c.id == sa.bindparam("job"))
            .values(submitted_by=sa.bindparam("by")),
            found,
        )


def downgrade() -> None:
    # ALTER TABLE in place (SQLite 3.35 and later, PostgreSQL): a batch copy of the table
    # would drop the old one, and its replicas with it (ON DELETE CASCADE).
    op.execute("ALTER TABLE jobs DROP COLUMN submitted_by")
