"""The one way a job's state changes: checked against the allowed moves and recorded as an event."""

from __future__ import annotations

from sqlalchemy.orm import Session

from kiban.domain.states import ALLOWED, JobState
from kiban.services import events
from kiban.services.auth import revoke_job_tokens
from kiban.services.runtime_estimates import record_finished
from kiban.store.models import Job


class IllegalTransition(RuntimeError):
    """A state change the lifecycle does not allow (a bug, never user input)."""


def transition(
    session: Session,
    job: Job,
    to: JobState,
    *,
    reason: str,
    message: str,
    at: float,
    warning: bool = False,
) -> None:
    """Move ``job`` to ``to``, stamp the matching time, and record why."""
    current = JobState(job.state)
    if to not in ALLOWED[current] and to is not current:
        raise IllegalTransition(f"job {job.id}: {current} -> {to} is not allowed")
    job.state = to.value
    if to is JobState.ADMITTED:
        job.admitted_at = at
    elif to is JobState.RUNNING:
        job.started_at = job.started_at or at
    elif to is JobState.PENDING:
        job.admitted_at = None
        revoke_job_tokens(session, job.id)  # back in its queue: no replica of it runs
    if to.terminal:
        job.finished_at = at
        job.queue_position = None
        revoke_job_tokens(session, job.id)  # its replicas' token ends with it
        if to is JobState.SUCCEEDED:
            record_finished(session, job, at)  # what run-time estimates learn from
    if to is not JobState.PENDING:
        job.reason_code = job.reason_message = None
        job.reason_details = None
        job.queue_position = None
    job.message = message
    events.record_for_job(session, job, reason, message, at, warning=warning)
