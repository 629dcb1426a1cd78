"""Listing jobs: the filters a caller may use (checked, each bad value named), a page of the
matching jobs newest first, and how many match on all pages; each one query over the jobs'
indexes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from sqlalchemy import JSON, ColumnElement, and_, case, func, null, or_, select, type_coerce
from sqlalchemy.orm import Session

from kiban.domain.states import JobState
from kiban.scheduler.reasons import ReasonCode
from kiban.services.auth import Principal
from kiban.services.errors import invalid
from kiban.services.jobs import NAME_PATTERN, is_job_id
from kiban.store.models import Job

MAX_LIST_OFFSET = 10_000_000
"""The most jobs a listing skips (pages far past any store's jobs are empty anyway)."""


def job_filters(
    principal: Principal,
    *,
    states: Sequence[str] = (),
    queue: str | None = None,
    tenant: str | None = None,
    name: str | None = None,
    submitted_by: str | None = None,
    reason: str | None = None,
    array: str | None = None,
    array_indices: bool = True,
) -> list[ColumnElement[bool]]:
    """The conditions that select the jobs the caller may see and asked for (checked: a bad
    value is InvalidInput naming its field). States are matched in any case (``running`` is
    ``Running``); ``submitted_by`` is the name of the token that submitted; ``reason`` a
    waiting job's reason code as the API shows it (``QueueBacklog`` for a job no pass has
    judged yet, ``reasons.awaiting_pass``); ``array`` the indices of one array only;
    ``array_indices`` False leaves every array's indices out (``kiban ls`` shows arrays
    folded, one line each)."""
    wanted = []
    for i, state in enumerate(states):
        try:
            wanted.append(JobState(state).value)
        except ValueError:
            known = ", ".join(s.value for s in JobState)
            raise invalid(f"state[{i}]", f"unknown state {state!r}; known: {known}") from None
    for field_name, what, value in (
        ("queue", "queue", queue),
        ("tenant", "tenant", tenant),
        ("name", "job", name),
    ):
        if value and not NAME_PATTERN.match(value):
            raise invalid(
                field_name, f"{value!r} is not a {what} name (lowercase letters, digits and '-')"
            )
    if reason:
        try:
            reason = ReasonCode(reason).value
        except ValueError:
            known = ", ".join(r.value for r in ReasonCode)
            raise invalid("reason", f"unknown reason {reason!r}; known: {known}") from None
    where: list[ColumnElement[bool]] = []
    if not principal.is_admin:
        where.append(Job.tenant == principal.tenant)
    elif tenant:
        where.append(Job.tenant == tenant)
    if wanted:
        where.append(Job.state.in_(wanted))
    if queue:
        where.append(Job.queue == queue)
    if name:
        where.append(Job.name == name)
    if submitted_by:
        where.append(Job.submitted_by == submitted_by)
    if array:
        if not is_job_id(array):
            raise invalid("array", f"{array!r} is not an array id")
        where.append(Job.array_id == array)
    if not array_indices:
        where.append(Job.array_id.is_(None))
    if reason == ReasonCode.QUEUE_BACKLOG.value:  # given at read time to the unjudged
        backlog = and_(Job.state == JobState.PENDING.value, Job.reason_code.is_(None))
        where.append(or_(Job.reason_code == reason, backlog))
    elif reason:
        where.append(Job.reason_code == reason)
    return where


class ListedJob(NamedTuple):
    """What a listing shows of a job (``kiban.api.schemas.job_out``), read as a plain row: no
    ORM object per job, no manifest parsed (the largest of its columns), and each field a
    tuple's (cheap to read, unlike a SQLAlchemy row's attributes)."""

    id: str
    name: str
    tenant: str
    queue: str
    state: str
    priority: int
    attempt: int
    submitted_at: float
    submitted_by: str | None
    admitted_at: float | None
    started_at: float | None
    finished_at: float | None
    reason_code: str | None
    reason_message: str | None
    reason_details: dict[str, Any] | None
    queue_position: int | None
    cluster_position: int | None
    eta: float | None
    eta_estimated: bool | None
    preempted_by: str | None
    last_checkpoint_at: float | None
    message: str | None
    master_port: int | None
    gpus: int | None
    replicas: int | None
    array_id: str | None
    array_index: int | None
    spec: dict[str, Any] | None
    """The manifest only where its counts (``gpus``, ``replicas``) are missing: rows stored
    before migrations 0011 and 0014 (``kiban.services.jobs.job_demand``)."""


def as_listed(job: Job) -> ListedJob:
    """A job not read from the store (a submission's, just written) as a listing's row: its
    values taken from the object at once, not through SQLAlchemy's attribute per field; a
    column it does not set reads None, as the object's attribute would."""
    values = vars(job)
    return ListedJob._make(values.get(name) for name in ListedJob._fields)


_SPEC_IF_UNCOUNTED = type_coerce(
    case((or_(Job.gpus.is_(None), Job.replicas.is_(None)), Job.spec), else_=null()), JSON
).label("spec")
LISTED_COLUMNS = (
    *(getattr(Job, name) for name in ListedJob._fields if name != "spec"),
    _SPEC_IF_UNCOUNTED,
)


def list_page(
    session: Session, where: Sequence[ColumnElement[bool]], *, offset: int = 0, limit: int = 100
) -> list[ListedJob]:
    """The jobs that match ``where`` (``job_filters``), newest first, from the ``offset``-th
    on, ``limit`` of them: one query over the jobs' indexes."""
    if not 1 <= limit <= 1000:
        raise invalid("limit", "must be between 1 and 1000")
    if not 0 <= offset <= MAX_LIST_OFFSET:
        raise invalid("offset", f"must be between 0 and {MAX_LIST_OFFSET}")
    query = (
        select(*LISTED_COLUMNS)
        .where(*where)
        .order_by(Job.submitted_at.desc(), Job.id)
        .offset(offset)
        .limit(limit)
    )
    return [ListedJob._make(row) for row in session.execute(query)]


def count_jobs(session: Session, where: Sequence[ColumnElement[bool]]) -> int:
    """How many jobs match ``where`` (``job_filters``): one count over the jobs' indexes."""
    return int(session.scalar(select(func.count()).select_from(Job).where(*where)) or 0)
