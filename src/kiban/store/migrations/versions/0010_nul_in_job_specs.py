"""Jobs accepted with a NUL character in their spec, not yet started, end as Failed.

Submission refuses NUL in every string that reaches exec since this revision (an environment
value was accepted, and its launch could only fail: the job stayed Admitted holding its GPUs,
and was admitted and stuck again after a restart). Such a job stored before, Pending or
Admitted, would no longer parse in the control loop's passes; it is failed here instead, as a
failed launch is: its replicas hold nothing, its job tokens go, an event says why. (None of
them can be running: its launch never succeeded.)

Revision ID: 0010_nul_specs
Revises: 0009
Create Date: 2026-11-26
"""

from __future__ import annotations

import time
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0010_nul_specs"
down_revision = "0009"
branch_labels = None
depends_on = None

NOT_STARTED = ("Pending", "Admitted")
MESSAGE = (
    "refused on upgrade: the spec holds a NUL character (in an environment value or the "
    "working directory), which no process can be started with"
)

jobs = sa.table(
    "jobs",
    sa.column("id", sa.String()),
    sa.column("tenant", sa.String()),
    sa.column("state", sa.String()),
    sa.column("spec", sa.JSON()),
    sa.column("finished_at", sa.Float()),
    sa.column("queue_position", sa.Integer()),
    sa.column("reason_code", sa.String()),
    sa.column("reason_message", sa.Text()),
    sa.column("reason_details", sa.JSON(none_as_null=True)),
    sa.column("message", sa.Text()),
)
replicas = sa.table(
    "replicas",
    sa.column("job_id", sa.String()),
    sa.column("active", sa.Boolean()),
    sa.column("state", sa.String()),
)
api_tokens = sa.table("api_tokens", sa.column("job_id", sa.String()))
events = sa.table(
    "events",
    sa.column("object_kind", sa.String()),
    sa.column("object_name", sa.String()),
    sa.column("tenant", sa.String()),
    sa.column("type", sa.String()),
    sa.column("reason", sa.String()),
    sa.column("message", sa.Text()),
    sa.column("at", sa.Float()),
)


def holds_nul(value: Any) -> bool:
    """Whether a JSON value has a NUL character in any string of it, keys included."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(holds_nul(k) or holds_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(holds_nul(v) for v in value)
    return False


def upgrade() -> None:
    connection = op.get_bind()
    # JSON text writes a NUL as the escape \u0000: only those rows are read and checked
    candidates = connection.execute(
        sa.select(jobs.c.id, jobs.c.tenant, jobs.c.spec)
        .where(jobs.c.state.in_(NOT_STARTED))
        .where(sa.cast(jobs.c.spec, sa.Text).contains("\\u0000", autoescape=True))
    ).all()
    now = time.time()
    for job_id, tenant, spec in candidates:
        if not holds_nul(spec):
            continue
        connection.execute(
            jobs.update()
            .where(jobs.c.id == job_id)
            .values(
                state="Failed",
                finished_at=now,
                queue_position=None,
                reason_code=None,
                reason_message=None,
                reason_details=None,
                message=MESSAGE,
            )
        )
        connection.execute(
            replicas.update()
            .where(replicas.c.job_id == job_id, replicas.c.active.is_(True))
            .values(active=False, state="Lost")
        )
        connection.execute(api_tokens.delete().where(api_tokens.c.job_id == job_id))
        connection.execute(
            events.insert().values(
                object_kind="Job",
                object_name=job_id,
                tenant=tenant,
                type="Warning",
                reason="LaunchFailed",
                message=MESSAGE,
                at=now,
            )
        )


def downgrade() -> None:
    """Nothing to undo: the jobs stay failed (they could never have started)."""
