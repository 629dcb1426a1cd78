"""Stop intents checked by the store, and the attempts a job's own failures ended counted.

``jobs.stop_intent`` takes only the intents of ``kiban.domain.stop_intents.StopIntent``: a
CHECK constraint on PostgreSQL; on SQLite, which cannot add a constraint to a table in place
(and a batch copy of ``jobs`` would drop its replicas with it, ON DELETE CASCADE), two
triggers that refuse any other value on insert and update. A stored intent that is none of
them (or a stopping job with none) becomes "fail", what settling made of it before, and the
job gets a warning event that says so; the downgrade keeps the mapped value.

``jobs.failed_attempts`` counts the attempts that ended in the job's own failure, checked
against its ``backoffLimit`` (a preemption or a lost node no longer uses up its retries);
jobs stored before count every earlier attempt, as the limit did until now.

Revision ID: 0013_stop_intents
Revises: 0012_submitted_by
Create Date: 2026-11-26
"""

from __future__ import annotations

import time

import sqlalchemy as sa
from alembic import op

revision = "0013_stop_intents"
down_revision = "0012_submitted_by"
branch_labels = None
depends_on = None

# The values of StopIntent when this revision was written (a migration never imports them).
INTENTS = ("cancel", "preempt", "requeue", "lost", "restart", "fail", "deadline")
ALLOWED = ", ".join(f"'{intent}'" for intent in INTENTS)
CHECK = f"stop_intent IS NULL OR stop_intent IN ({ALLOWED})"
CONSTRAINT = "ck_jobs_stop_intent"
TRIGGERS = ("jobs_stop_intent_insert", "jobs_stop_intent_update")


def upgrade() -> None:
    bind = op.get_bind()
    op.add_column(
        "jobs",
        sa.Column("failed_attempts", sa.Integer(), nullable=False, server_default="0"),
    )
    op.execute("UPDATE jobs SET failed_attempts = attempt - 1 WHERE attempt > 1")
    map_unknown_intents(bind)
    if bind.dialect.name == "sqlite":
        for trigger, when in zip(TRIGGERS, ("INSERT", "UPDATE OF stop_intent"), strict=True):
            op.execute(
                f"CREATE TRIGGER {trigger} BEFORE {when} ON jobs "
                f"WHEN NEW.stop_intent IS NOT NULL AND NEW.stop_intent NOT IN ({ALLOWED}) "
                "BEGIN SELECT RAISE(ABORT, 'jobs.stop_intent: not a stop intent'); END"
            )
    else:
        op.execute(f"ALTER TABLE jobs ADD CONSTRAINT {CONSTRAINT} CHECK ({CHECK})")


def map_unknown_intents(bind: sa.Connection) -> None:
    """Intents no rule knows (and stopping jobs with none) become "fail", with an event."""
    jobs = sa.table(
        "jobs",
        sa.column("id", sa.String),
        sa.column("tenant", sa.String),
        sa.column("state", sa.String),
        sa.column("stop_intent", sa.String),
    )
    unknown = sa.or_(
        sa.and_(jobs.c.stop_intent.is_not(None), jobs.c.stop_intent.not_in(INTENTS)),
        sa.and_(jobs.c.stop_intent.is_(None), jobs.c.state == "Stopping"),
    )
    found = bind.execute(sa.select(jobs.c.id, jobs.c.tenant, jobs.c.stop_intent).where(unknown))
    events = [
        {
            "object_kind": "Job",
            "object_name": job_id,
            "tenant": tenant,
            "type": "Warning",
            "reason": "StopIntentUnknown",
            "message": f"stop intent {intent!r} is unknown; it stops as failed",
            "at": time.time(),
        }
        for job_id, tenant, intent in found
    ]
    if not events:
        return
    bind.execute(jobs.update().where(unknown).values(stop_intent="fail"))
    table = sa.table(
        "events",
        *(sa.column(name) for name in ("object_kind", "object_name", "tenant", "type")),
        sa.column("reason"),
        sa.column("message"),
        sa.column("at"),
    )
    bind.execute(table.insert(), events)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for trigger in TRIGGERS:
            op.execute(f"DROP TRIGGER {trigger}")
    else:
        op.execute(f"ALTER TABLE jobs DROP CONSTRAINT {CONSTRAINT}")
    # ALTER TABLE in place (SQLite 3.35 and later, PostgreSQL): a batch copy of the table
    # would drop the old one, and its replicas with it (ON DELETE CASCADE).
    op.execute("ALTER TABLE jobs DROP COLUMN failed_attempts")
