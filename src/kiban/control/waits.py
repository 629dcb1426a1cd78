"""Recording why a job waits: its reason, positions and start estimate, written only on change.

A pass judges every job in its window; most keep the reason, positions and estimate they had,
so only what changed is written (all of it in one statement), and a new reason code is also an
event on the job.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import bindparam, select, update
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


_WRITE = (
    update(Job)
    .where(Job.id == bindparam("w_job_id"), Job.state == JobState.PENDING.value)
    .values(
        reason_code=bindparam("w_code"),
        reason_message=bindparam("w_message"),
        reason_details=bindparam("w_details"),
        queue_position=bindparam("w_position"),
        cluster_position=bindparam("w_cluster"),
        eta=bindparam("w_eta"),
    )
)
"""One waiting job's reason, positions and estimate; only while it is still pending."""


def record_waits(
    session: Session,
    changed: Sequence[tuple[Wait, RecordedWait | None, float | None]],
    now: float,
) -> None:
    """Store the reasons, positions and estimates of waiting jobs (each with what the store
    said of it before, and its forecast) in one statement; a new reason code is also an event
    on each job still pending. Not committed."""
    if not changed:
        return
    session.connection().execute(  # a plain executemany: no ORM bulk update by primary key
        _WRITE,
        [
            {
                "w_job_id": wait.job_id,
                "w_code": wait.reason.code.value,
                "w_message": wait.reason.message,
                "w_details": wait.reason.details,
                "w_position": wait.queue_position or None,
                "w_cluster": wait.cluster_position or None,
                "w_eta": rounded(eta),
            }
            for wait, _before, eta in changed
        ],
    )
    new_code = {
        wait.job_id: (wait, before)
        for wait, before, _eta in changed
        if before is not None and before.code != wait.reason.code.value
    }
    if not new_code:
        return
    # The writes above hold the store's write lock: what is pending now stays so until commit.
    still = set(
        session.scalars(
            select(Job.id).where(Job.id.in_(list(new_code)), Job.state == JobState.PENDING.value)
        )
    )
    for job_id, (wait, before) in new_code.items():
        if job_id in still and before is not None:
            events.record(
                session,
                kind="Job",
                name=job_id,
                tenant=before.tenant,
                reason=wait.reason.code.value,
                message=wait.reason.message,
                at=now,
            )
