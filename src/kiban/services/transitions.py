"""The one way a job's state changes: checked against the allowed moves and recorded as an event."""

from __future__ import annotations

from sqlalchemy.orm import Session

from kiban.domain.event_reasons import JobEventReason
from kiban.domain.states import ALLOWED, JobState
from kiban.domain.stop_intents import StopIntent
from kiban.services import accounting, events
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
    reason: JobEventReason,
    message: str,
    at: float,
    warning: bool = False,
    intent: StopIntent | None = None,
) -> None:
    """Move ``job`` to ``to``, stamp the matching time, and record why; a move that ends the
    attempt holding resources closes its usage record (``intent``: the stop that ended it, when
    the job's own is already cleared). ``reason``: an enum member, never free text."""
    current = JobState(job.state)
    if to not in ALLOWED[current] and to is not current:
        raise IllegalTransition(f"job {job.id}: {current} -> {to} is not allowed")
    if accounting.ends_attempt(current, to):
        outcome = accounting.attempt_outcome(to, intent or job.stop_intent)
        accounting.close_attempt(session, job.id, outcome, at)
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
