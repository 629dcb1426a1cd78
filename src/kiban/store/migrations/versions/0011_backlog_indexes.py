"""A long backlog costs readers what they show, not what waits: each job's GPUs in a column and
in the index of jobs per queue and state (queue status adds them up from the index instead of
parsing every pending job's spec), the pending jobs a pass judged indexed apart, and jobs
listed newest first through an index (all, or by state).

Revision ID: 0011_backlog_indexes
Revises: 0010_nul_specs
Create Date: 2026-11-26
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0011_backlog_indexes"
down_revision = "0010_nul_specs"
branch_labels = None
depends_on = None

JUDGED = sa.text("state = 'Pending' AND reason_code IS NOT NULL")
NOT_ENDED = ("Pending", "Admitted", "Running", "Stopping")


def requested_gpus(spec: Any) -> int:
    """GPUs a stored manifest asks for (as ``kiban.services.jobs.requested`` counts them),
    written out here so that this migration does not change when that code does."""
    document = json.loads(spec) if isinstance(spec, str) else spec or {}
    tasks = (document.get("spec") or {}).get("tasks") or []
    return sum(
        int(t.get("replicas", 1)) * int((t.get("resources") or {}).get("gpu", 0)) for t in tasks
    )


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("gpus", sa.Integer(), nullable=True))
    connection = op.get_bind()
    jobs = sa.table("jobs", sa.column("id", sa.String), sa.column("state", sa.String))
    rows = connection.execute(
        sa.select(jobs.c.id, sa.column("spec")).where(jobs.c.state.in_(NOT_ENDED))
    ).all()
    if rows:
        connection.execute(
            sa.text("UPDATE jobs SET gpus = :gpus WHERE id = :id"),
            [{"id": job_id, "gpus": requested_gpus(spec)} for job_id, spec in rows],
        )
    op.drop_index("ix_jobs_state", table_name="jobs")
    op.drop_index("ix_jobs_queue_state", table_name="jobs")
    op.create_index("ix_jobs_queue_state", "jobs", ["queue", "state", "gpus"])
    newest_first: list[str | sa.TextClause] = [sa.text("submitted_at DESC"), "id"]
    op.create_index("ix_jobs_state_submitted", "jobs", ["state", *newest_first])
    op.create_index("ix_jobs_submitted", "jobs", newest_first)
    op.create_index(
        "ix_jobs_pending_judged", "jobs", ["queue"], sqlite_where=JUDGED, postgresql_where=JUDGED
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_pending_judged", table_name="jobs")
    op.drop_index("ix_jobs_submitted", table_name="jobs")
    op.drop_index("ix_jobs_state_submitted", table_name="jobs")
    op.create_index("ix_jobs_state", "jobs", ["state"])
    op.drop_index("ix_jobs_queue_state", table_name="jobs")
    op.create_index("ix_jobs_queue_state", "jobs", ["queue", "state"])
    # ALTER TABLE in place (SQLite 3.35 and later, PostgreSQL): a batch copy of the table
    # would drop the old one, and its replicas with it (ON DELETE CASCADE).
    op.execute("ALTER TABLE jobs DROP COLUMN gpus")
