"""Notebooks: start (or start again), list, read and stop; the key Jupyter tokens derive from.

A notebook's run is an ordinary job (``kiban.domain.notebook.notebook_job_manifest``) that
queues, counts against quotas and is placed like any other; the notebook controller
(``kiban.control.notebook_controller``) follows it: readiness, idle culling, its end.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from kiban.domain.cluster import ClusterPolicy
from kiban.domain.errors import FieldProblem
from kiban.domain.event_reasons import JobEventReason
from kiban.domain.notebook import (
    NOTEBOOK_LABEL,
    NotebookRequest,
    NotebookRuntime,
    NotebookSpec,
    NotebookState,
    job_name_of,
    jupyter_token,
    notebook_dir,
    notebook_job_manifest,
)
from kiban.domain.states import JobState
from kiban.domain.stop_intents import StopIntent
from kiban.executors.base import Executor
from kiban.executors.local.executor import LocalExecutor
from kiban.executors.local.isolation import HOME_MODE
from kiban.services import jobs
from kiban.services.auth import Principal
from kiban.services.errors import InvalidInput, NotFound, Unavailable, invalid
from kiban.services.jobs import ClusterFacts
from kiban.services.transitions import transition
from kiban.store.models import Job, Queue, Replica
from kiban.store.models_serving import NotebookKey, NotebookRow

KEY_ROW = 1


def notebook_key(session: Session) -> bytes:
    """The store's notebook key, made on first use (one row; any control plane of the store
    derives the same tokens)."""
    row = session.get(NotebookKey, KEY_ROW)
    if row is None:
        try:
            with session.begin_nested():
                row = NotebookKey(id=KEY_ROW, key=secrets.token_hex(32))
                session.add(row)
        except IntegrityError:  # made by another at the same moment: take theirs
            row = session.get(NotebookKey, KEY_ROW, populate_existing=True)
            assert row is not None
    return row.key.encode()


def token_of(session: Session, tenant: str, name: str, job_id: str) -> str:
    """The Jupyter token of one run of a notebook."""
    return jupyter_token(notebook_key(session), tenant, name, job_id)


def launch_env(session: Session, job: Job) -> dict[str, str]:
    """What the launcher adds to a notebook job's environment: its Jupyter token (nothing for
    other jobs). Passed by environment so that it is in no spec, no event and no argv."""
    labels = (job.spec.get("metadata") or {}).get("labels") or {}
    name = labels.get(NOTEBOOK_LABEL)
    if not isinstance(name, str):
        return {}
    return {"JUPYTER_TOKEN": token_of(session, job.tenant, name, job.id)}


def _tenant_of(principal: Principal, request: NotebookRequest, session: Session) -> str:
    """The notebook's tenant: the caller's; for an admin the named queue's, or that of the one
    notebook of that name."""
    if principal.tenant is not None:
        return principal.tenant
    if request.queue is None:
        named = list(session.scalars(select(NotebookRow).where(NotebookRow.name == request.name)))
        if len(named) == 1:
            return named[0].tenant
    if request.queue is not None:
        row = session.get(Queue, request.queue)
        if row is not None:
            return row.tenant
    raise invalid("queue", "an admin token has no tenant: name the queue the notebook runs in")


def start(
    session: Session,
    principal: Principal,
    request: NotebookRequest,
    *,
    home: Path,
    executor: Executor,
    facts: ClusterFacts,
    policy: ClusterPolicy,
    at: float,
    fields_set: frozenset[str] = frozenset(),
) -> NotebookRow:
    """Start a notebook: a new one, or a stopped one again with its directory as it was (the
    fields given replace those of its last spec). One still running is returned as it is.
    Not committed."""
    spec = request.spec()
    tenant = _tenant_of(principal, request, session)
    row = session.scalar(
        select(NotebookRow)
        .where(NotebookRow.tenant == tenant, NotebookRow.name == request.name)
        .with_for_update()
    )
    if row is not None:
        if not _may_use(principal, row):
            raise invalid("name", f"notebook {request.name} belongs to someone else")
        if NotebookState(row.state).active:
            return row
        before = NotebookSpec.model_validate(row.spec)
        spec = before.model_copy(update={k: getattr(spec, k) for k in fields_set - {"name"}})
    owner = row.owner if row is not None else principal.name
    document = notebook_job_manifest(
        tenant=tenant,
        name=request.name,
        spec=spec,
        runtime=runtime_of(executor, home, tenant, owner, request.name),
        priority_class=policy.notebook_class(),
        job_name=job_name_of(request.name),
    )
    try:
        prepared = jobs.prepare_submission(
            session, principal, document, facts=facts, at=at, policy=policy
        )
    except InvalidInput as exc:  # the job's fields are the notebook's: name the notebook's
        raise InvalidInput(
            [FieldProblem(_own_field(p.field), p.message) for p in exc.problems]
        ) from None
    if prepared.job.tenant != tenant:
        raise invalid("queue", f"queue {prepared.job.queue} is not tenant {tenant}'s")
    session.add(prepared.job)
    session.add_all(prepared.events)
    stored = spec.model_dump(mode="json", by_alias=True)
    if row is None:
        row = NotebookRow(
            tenant=tenant,
            name=request.name,
            owner=owner,
            created_at=at,
        )
        session.add(row)
    row.spec = stored
    row.job_id = prepared.job.id
    row.state = NotebookState.STARTING.value
    row.started_at = at
    row.ready_at = None
    row.last_activity = None
    row.reason = None
    session.flush()
    return row


def runtime_of(
    executor: Executor, home: Path, tenant: str, owner: str, name: str
) -> NotebookRuntime:
    """How the notebook's server runs: where the executor keeps notebooks' directories itself
    (a volume claim on Kubernetes), there; else in a directory under kiban's home."""
    storage = executor.offers.notebooks
    if storage is None:
        return NotebookRuntime(root_dir=str(prepare_dir(executor, home, tenant, owner, name)))
    try:
        return storage.notebook_runtime(tenant, owner, name)
    except Exception as exc:
        raise Unavailable(f"notebook {name}'s directory could not be made: {exc}", 5) from exc


def prepare_dir(executor: Executor, home: Path, tenant: str, owner: str, name: str) -> Path:
    """Make the notebook's persistent directory; where local jobs run as their tenant's user,
    it is that user's (0700) and the directories above it may be passed through (0711)."""
    path = notebook_dir(home, tenant, owner, name)
    path.mkdir(parents=True, exist_ok=True)
    isolation = executor.isolation if isinstance(executor, LocalExecutor) else None
    if isolation is not None:
        above = path.parent
        while above != home:
            os.chmod(above, HOME_MODE)
            above = above.parent
        isolation.give(path, isolation.user_for(tenant))
    return path


_FIELDS = {
    "spec.queue": "queue",
    "spec.tasks[0].resources.gpu": "gpus",
    "spec.tasks[0].resources.cpu": "cpus",
}


def _own_field(field: str) -> str:
    return _FIELDS.get(field, field)


def _may_use(principal: Principal, row: NotebookRow) -> bool:
    """The owner, or an admin: a notebook runs code as its owner, so no one else of the
    tenant gets in."""
    return principal.is_admin or (principal.tenant == row.tenant and principal.name == row.owner)


def list_notebooks(session: Session, principal: Principal) -> list[NotebookRow]:
    """The caller's own notebooks (an admin: everyone's), by tenant and name."""
    query = select(NotebookRow).order_by(NotebookRow.tenant, NotebookRow.name)
    if not principal.is_admin:
        query = query.where(
            NotebookRow.tenant == principal.tenant, NotebookRow.owner == principal.name
        )
    return list(session.scalars(query))


def get_visible(
    session: Session, principal: Principal, name: str, tenant: str | None = None
) -> NotebookRow:
    """The notebook if the caller may use it; NotFound otherwise (never says whose it is)."""
    tenant = tenant or principal.tenant
    row = None
    if tenant is not None:
        row = session.scalar(
            select(NotebookRow).where(NotebookRow.tenant == tenant, NotebookRow.name == name)
        )
    elif principal.is_admin:
        found = list(session.scalars(select(NotebookRow).where(NotebookRow.name == name)))
        row = found[0] if len(found) == 1 else None
    if row is None or not _may_use(principal, row):
        raise NotFound(f"notebook {name} not found")
    return row


def stop(session: Session, principal: Principal, name: str, at: float) -> NotebookRow:
    """Stop a notebook: its job is cancelled (GPUs released), its directory kept."""
    row = get_visible(session, principal, name)
    if not NotebookState(row.state).active:
        return row
    stop_run(
        session,
        row,
        NotebookState.STOPPED,
        JobEventReason.NOTEBOOK_STOPPED,
        f"stopped by {principal.name}",
        at,
    )
    return row


def stop_run(
    session: Session,
    row: NotebookRow,
    state: NotebookState,
    reason: JobEventReason,
    message: str,
    at: float,
) -> None:
    """End a notebook's run: its job stops (recorded with ``reason`` in its events) and the
    notebook becomes ``state`` with the message as its reason. Not committed."""
    row.state = state.value
    row.reason = message
    job = session.get(Job, row.job_id, with_for_update=True) if row.job_id else None
    if job is None:
        return
    job_state = JobState(job.state)
    if job_state.terminal:
        return
    if job_state is JobState.PENDING:
        transition(session, job, JobState.CANCELLED, reason=reason, message=message, at=at)
        return
    job.stop_intent = StopIntent.CANCEL
    if job_state is not JobState.STOPPING:
        job.stop_deadline = at + jobs.parse_grace(job)
        transition(session, job, JobState.STOPPING, reason=reason, message=message, at=at)


def running_replica(session: Session, row: NotebookRow) -> tuple[Job, Replica] | None:
    """The notebook's running job and its one replica (None unless it runs)."""
    if row.job_id is None:
        return None
    job = session.get(Job, row.job_id)
    if job is None or job.state != JobState.RUNNING.value or job.master_port is None:
        return None
    replica = session.scalar(
        select(Replica).where(
            Replica.job_id == job.id, Replica.attempt == job.attempt, Replica.active.is_(True)
        )
    )
    return None if replica is None else (job, replica)
