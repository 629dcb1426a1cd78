"""Recording why a job waits: its reason, positions and start estimate, written only on change.

A pass judges every job in its window; most keep the reason, positions and estimate they had,
so only what changed is written, and a new reason code is also an event on the job.
"""

from __future__ import annotations

from sqlalchemy import update
from sqlalchemy.orm import Session

from kiban.control.snapshot_builder import RecordedWait
from kiban.domain.states import JobState
from kiban.scheduler.decisions import Wait
from kiban.services import events
from kiban.store.models import Job


def rounded(eta: float | None) -> float | None:
    """Forecasts to the second, so that noise does not rewrite every waiting job."""
    return None if eta is None else float(round(eta))


def wait_changed(wait: Wait, before: RecordedWait | None, eta: float | None) -> bool:
    """Whether the wait differs from what is recorded (reason, positions, rounded estimate)."""
    if before is None:
        return True
    now = (
        wait.reason.code.value,
        wait.reason.message,
        wait.queue_position,
        wait.cluster_position,
        rounded(eta),
    )
    return now != (before.code, before.message, before.position, before.cluster, before.eta)


def record_wait(
    session: Session,
    wait: Wait,
    before: RecordedWait | None,
    eta: float | None,
    now: float,
) -> None:
    """Store a waiting job's reason and position; a new reason code is also an event."""
    reason = wait.reason
    updated = session.execute(
        update(Job)
        .where(Job.id == wait.job_id, Job.state == JobState.PENDING.value)
        .values(
            reason_code=reason.code.value,
            reason_message=reason.message,
            reason_details=reason.details,
            queue_position=wait.queue_position or None,
            cluster_position=wait.cluster_position or None,
            eta=rounded(eta),
        )
    )
    if getattr(updated, "rowcount", 1) == 0 or before is None:
        return  # no longer pending
    if before.code != reason.code.value:
        events.record(
            session,
            kind="Job",
            name=wait.job_id,
            tenant=before.tenant,
            reason=reason.code.value,
            message=reason.message,
            at=now,
        )
