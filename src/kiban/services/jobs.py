"""Submitting, finding, listing and cancelling jobs (what a submission is checked against
is in ``cluster_facts``)."""

from __future__ import annotations

import random
import re
import secrets
import string
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session

from kiban.domain.cluster import ClusterPolicy
from kiban.domain.declarations import DEFAULT_QUEUE
from kiban.domain.errors import FieldProblem, SpecError
from kiban.domain.event_reasons import JobEventReason
from kiban.domain.job_relations import Relations
from kiban.domain.jobspec import JobManifest
from kiban.domain.manifests import JobSubmission, json_problem, parse_job_manifest, parse_submission
from kiban.domain.states import JobState
from kiban.domain.stop_intents import StopIntent
from kiban.executors.base import Capability
from kiban.scheduler.reasons import counted
from kiban.services import events
from kiban.services.auth import Principal
from kiban.services.cluster_facts import ClusterFacts as ClusterFacts
from kiban.services.cluster_facts import check_against_cluster as check_against_cluster
from kiban.services.errors import Conflict, InvalidInput, NotFound, invalid
from kiban.services.policy import current_policy
from kiban.services.transitions import transition
from kiban.store.models import Event, Job, Queue, Replica

_ID_CHARS = string.ascii_lowercase + string.digits
_ID_PATTERN = re.compile(r"^[a-z0-9][-a-z0-9]{0,79}$")  # what new_job_id (and arrays) make
NAME_PATTERN = re.compile(r"^[a-z0-9][-a-z0-9]{0,62}$")  # job, queue and tenant names


# Job ids need to be unique, not secret: a generator seeded once from the OS is enough, and
# spares each submission the ~10 getrandom system calls of secrets.choice (measured at 0.6 ms
# per submission on a virtual machine).
_ids = random.Random(secrets.randbits(128))
_ids_lock = threading.Lock()


def new_job_id(name: str) -> str:
    """``<name>-<6 random letters or digits>``."""
    with _ids_lock:
        suffix = "".join(_ids.choices(_ID_CHARS, k=6))
    return f"{name[:57]}-{suffix}"


ID_RENEWALS = 3
"""Fresh ids a new job may take when its random one belongs to a stored job already."""


def renew_job_id(job: Job, made: Iterable[Event]) -> None:
    """Give ``job`` a fresh id (its random one is another stored job's), in its events too."""
    taken, job.id = job.id, new_job_id(job.name)
    for event in made:
        if event.object_kind == "Job" and event.object_name == taken:
            event.object_name = job.id


def submit(
    session: Session,
    principal: Principal,
    document: dict[str, Any],
    *,
    facts: ClusterFacts,
    at: float,
    policy: ClusterPolicy | None = None,
) -> Job:
    """Validate a job manifest against the cluster and queue it; nothing is stored on error.
    One job only: an array or dependencies go through the API (``job_intake``), never
    dropped here unsaid."""
    prepared = prepare_submission(session, principal, document, facts=facts, at=at, policy=policy)
    spec = (document.get("spec") or {}) if isinstance(document, dict) else {}
    for name in ("array", "dependsOn"):
        if spec.get(name):
            raise invalid(f"spec.{name}", "submit arrays and dependencies through the API")
    session.add_all([prepared.job, *prepared.events])
    return prepared.job


@dataclass(frozen=True)
class Prepared:
    """An accepted submission not yet stored: the job, its events, warnings for the submitter."""

    job: Job
    events: tuple[Event, ...]
    warnings: tuple[str, ...] = ()
    relations: Relations | None = None  # an array, or dependencies: set where the store is read


def submission_warnings(submission: JobSubmission, facts: ClusterFacts) -> list[str]:
    """The translation's warnings, and the fields an executor without containers ignores."""
    warnings = list(submission.warnings)
    if Capability.CONTAINERS in facts.capabilities:
        return warnings + affinity_warnings(submission)
    spec = submission.manifest.spec
    ignored = [
        submission.source_path(f"spec.tasks[{i}].{name}")
        for i, task in enumerate(spec.tasks)
        for name in _ignored_locally(submission, i, task.container_fields())
    ]
    if spec.master_port is not None:
        port = submission.source_path("spec.masterPort")
        ignored.append(f"{port} (its port: a free one is used)")
    return warnings + local_executor_warning(ignored)


def affinity_warnings(submission: JobSubmission) -> list[str]:
    """One warning per task whose pods would carry affinity that changes nothing (see
    ``node_affinity.read_pod_affinity``): said, so that nobody counts on it. A required
    anti-affinity that keeps the task's own replicas on distinct hosts is kept, as
    ``maxReplicasPerNode: 1``, and not warned of."""
    found = []
    for i in range(len(submission.manifest.spec.tasks)):
        unused = submission.pod_affinity(i).without_effect
        if unused:
            paths = ", ".join(
                submission.source_path(f"spec.tasks[{i}].affinity.{name}") for name in unused
            )
            found.append(
                f"{paths}: no effect (kiban chooses each replica's node and binds its pod there, "
                "by nodeSelector, node affinity and maxReplicasPerNode, not by other pods)"
            )
    return found


def _ignored_locally(submission: JobSubmission, index: int, fields: list[str]) -> list[str]:
    """The container-only fields of a task that a local executor ignores: all of them, but of
    ``affinity`` only its parts other than a pod anti-affinity read as one replica per node
    (which every executor keeps)."""
    if "affinity" not in fields:
        return fields
    affinity = submission.manifest.spec.tasks[index].affinity or {}
    reading = submission.pod_affinity(index)
    if not reading.one_per_node:
        return fields
    parts = [*(["nodeAffinity"] if affinity.get("nodeAffinity") else []), *reading.without_effect]
    others = [name for name in fields if name != "affinity"]
    return others + [f"affinity.{part}" for part in parts]


def local_executor_warning(ignored: Sequence[str]) -> list[str]:
    """The one warning (none when ``ignored`` is empty) that an executor without
    ``Capability.CONTAINERS`` ignores these container-only fields, named as written; for jobs
    and services alike."""
    if not ignored:
        return []
    return [
        "the local executor runs each replica as a local process and ignores "
        f"container-only fields: {', '.join(ignored)}"
    ]


def check_against_policy(manifest: JobManifest, policy: ClusterPolicy) -> int:
    """The job's priority value; refuses a priority class or topology level the policy lacks."""
    spec = manifest.spec
    level = policy.priority(spec.priority_class)
    if level is None:
        known = ", ".join(c.name for c in policy.priority_classes) or "none"
        raise invalid(
            "spec.priorityClass",
            f"unknown priority class {spec.priority_class!r}; known: {known}",
        )
    if spec.topology is not None and spec.topology.level not in policy.topology_levels:
        known = ", ".join(policy.topology_levels) or "none (the cluster declares no topology)"
        raise invalid(
            "spec.topology.level",
            f"unknown topology level {spec.topology.level!r}; known: {known}",
        )
    return level.value


def default_queue(principal: Principal, policy: ClusterPolicy) -> str:
    """The queue of a job whose manifest names none: ``default`` for the admin; for a member,
    their tenant's queue when it has one, else the one named after the tenant. Otherwise the
    member must name one (the error lists them)."""
    if principal.tenant is None:
        return DEFAULT_QUEUE
    own = [q.name for q in policy.queues if q.tenant == principal.tenant]
    if len(own) == 1:
        return own[0]
    if principal.tenant in own:
        return principal.tenant
    if not own:
        raise SpecError.single(
            "spec.queue", f"tenant {principal.tenant} has no queue; an admin adds one"
        )
    raise SpecError.single(
        "spec.queue",
        f"name a queue (kiban run --queue, or KIBAN_QUEUE): tenant {principal.tenant} has "
        f"{len(own)}: {', '.join(sorted(own))}",
    )


def prepare_submission(
    session: Session,
    principal: Principal,
    document: dict[str, Any],
    *,
    facts: ClusterFacts,
    at: float,
    find_queue: Callable[[str], Queue | None] | None = None,
    policy: ClusterPolicy | None = None,
) -> Prepared:
    """Validate a job manifest and build its row and events, without storing them.

    The events are "Submitted", and "SubmittedWithWarnings" when some fields are ignored (those
    warnings also go back to the submitter). ``find_queue`` looks a queue up by name (default:
    in ``session``); ``policy`` is the current cluster policy (default: read from ``session``).
    Errors name the field as the submitted file wrote it (a Volcano Job's own paths).
    """
    submission = parse_checked(document)
    policy = current_policy(session) if policy is None else policy
    queue_name = queue_of(submission, principal, policy)
    queue = session.get(Queue, queue_name) if find_queue is None else find_queue(queue_name)
    return prepare_parsed(
        submission, principal, queue_name, queue, facts=facts, at=at, policy=policy
    )


def parse_checked(document: dict[str, Any], plain_json: bool = False) -> JobSubmission:
    """The submitted document parsed as a job manifest (InvalidInput naming the field);
    ``plain_json``: read from JSON without ``NaN`` or ``Infinity``, so that every value in it
    is one the store holds (``job_intake.read_manifest_body``) and none is looked for."""
    problem = None if plain_json else json_problem(document)
    if problem is not None:
        raise invalid(*problem)
    return parse_submission(document)


@contextmanager
def _as_submitted(submission: JobSubmission) -> Iterator[None]:
    """Spec errors raised inside name the field as the submitted file wrote it."""
    try:
        yield
    except SpecError as exc:
        raise InvalidInput(
            [FieldProblem(submission.source_path(p.field), p.message) for p in exc.problems]
        ) from None


def queue_of(submission: JobSubmission, principal: Principal, policy: ClusterPolicy) -> str:
    """The name of the queue the job goes to: its own, or the caller's default one."""
    spec = submission.manifest.spec
    if "queue" in spec.model_fields_set:
        return spec.queue
    with _as_submitted(submission):
        return default_queue(principal, policy)


def prepare_parsed(
    submission: JobSubmission,
    principal: Principal,
    queue_name: str,
    queue: Queue | None,
    *,
    facts: ClusterFacts,
    at: float,
    policy: ClusterPolicy,
) -> Prepared:
    """``prepare_submission`` once the manifest is parsed and its queue (``queue_name``, None
    when there is no such queue) found."""
    manifest = submission.manifest
    spec = manifest.spec
    with _as_submitted(submission):
        if queue is None or not principal.can_see(queue.tenant):
            raise invalid("spec.queue", f"queue {queue_name} does not exist")
        priority = check_against_policy(manifest, policy)
        check_against_cluster(manifest, facts, policy, queue.name)
    warnings = submission_warnings(submission, facts)
    job = Job(
        id=new_job_id(manifest.metadata.name),
        name=manifest.metadata.name,
        tenant=queue.tenant,
        queue=queue.name,
        state=JobState.PENDING.value,
        priority=priority,
        spec=submission.document,
        submitted_at=at,
        submitted_by=principal.name,
        attempt=1,
        gpus=spec.total_gpus,
        replicas=spec.total_replicas,
    )
    made = [
        events.new_event(
            kind="Job",
            name=job.id,
            tenant=job.tenant,
            reason=JobEventReason.SUBMITTED,
            message=f"submitted by {principal.name} to queue {queue.name} "
            f"({counted(spec.total_replicas, 'replica')}, {counted(spec.total_gpus, 'GPU')})",
            at=at,
        )
    ]
    if warnings:
        made.append(
            events.new_event(
                kind="Job",
                name=job.id,
                tenant=job.tenant,
                reason=JobEventReason.SUBMITTED_WITH_WARNINGS,
                message="; ".join(warnings),
                at=at,
                warning=True,
            )
        )
    return Prepared(job, tuple(made), tuple(warnings))


def is_job_id(text: str) -> bool:
    """Whether ``text`` has the shape of an id kiban makes (a job's, an array's, an array
    index's): others are never looked up (PostgreSQL refuses NUL characters, for one)."""
    return len(text) <= 80 and _ID_PATTERN.match(text) is not None


def get_visible(session: Session, principal: Principal, job_id: str) -> Job:
    """The job if the caller may see it; NotFound otherwise (never reveals other tenants' jobs)."""
    job = session.get(Job, job_id) if is_job_id(job_id) else None
    if job is None or not principal.can_see(job.tenant):
        raise NotFound(f"job {job_id} not found")
    return job


@dataclass(frozen=True, slots=True)
class Demand:
    """What a job asks for, all its tasks together."""

    replicas: int
    gpus: int


def manifest_demand(document: dict[str, Any]) -> Demand:
    """What a stored (already validated) manifest asks for, read by the manifest parser."""
    spec = parse_job_manifest(document).spec
    return Demand(spec.total_replicas, spec.total_gpus)


class DemandColumns(Protocol):
    """What ``job_demand`` reads of a job: a ``Job`` row, or a listing's columns
    (``kiban.services.job_listing``; ``spec`` there only where the counts are missing)."""

    @property
    def replicas(self) -> int | None: ...
    @property
    def gpus(self) -> int | None: ...
    @property
    def spec(self) -> dict[str, Any] | None: ...


def job_demand(job: DemandColumns) -> Demand:
    """What the job asks for: from its columns, set at submission; from its manifest in rows
    stored before they were (migrations 0011 and 0013)."""
    if job.replicas is not None and job.gpus is not None:
        return Demand(job.replicas, job.gpus)
    if job.spec is None:  # a listing reads the spec of every job whose counts are missing
        raise ValueError("a job without replica and GPU counts was read without its spec")
    return manifest_demand(job.spec)


def replicas_of(session: Session, job: Job) -> list[Replica]:
    """The replicas of the job's current attempt, in rank order."""
    query = (
        select(Replica)
        .where(Replica.job_id == job.id, Replica.attempt == job.attempt)
        .order_by(Replica.rank)
    )
    return list(session.scalars(query))


def cancel(session: Session, principal: Principal, job_id: str, at: float) -> Job:
    """Cancel a job: a pending one at once, a running one after its grace period."""
    job = get_visible(session, principal, job_id)
    principal.require_own(job.submitted_by, f"cancelling job {job.id}")
    if JobState(job.state).terminal:
        raise Conflict(f"job {job.id} has already finished ({job.state})")
    stop_unended(session, job, f"cancelled by {principal.name}", at)
    return job


def stop_unended(session: Session, job: Job, said: str, at: float) -> None:
    """End a job not ended yet as cancelled: a pending one at once (held or not), a running one
    after its grace period; ``said`` (``cancelled by alice``) opens the event's message."""
    state = JobState(job.state)
    if state is JobState.PENDING:
        job.gate = None  # held for a dependency or an array slot: no longer
        transition(
            session,
            job,
            JobState.CANCELLED,
            reason=JobEventReason.CANCELLED,
            message=f"{said} while pending",
            at=at,
        )
        return
    job.stop_intent = StopIntent.CANCEL
    if state is JobState.STOPPING:
        return
    grace = parse_grace(job)
    job.stop_deadline = at + grace
    transition(
        session,
        job,
        JobState.STOPPING,
        reason=JobEventReason.CANCELLING,
        message=f"{said}; stopping replicas (grace {grace:g}s)",
        at=at,
    )


def parse_grace(job: Job) -> float:
    """The job's termination grace period in seconds."""
    manifest = parse_job_manifest(job.spec)
    return manifest.spec.termination_grace_period or 0.0


def report_checkpoint(session: Session, principal: Principal, job_id: str, at: float) -> Job:
    """Record that a running job saved a checkpoint at ``at``: preemption then prefers victims
    that lose the least work since their last checkpoint.

    NotFound for a job the caller may not see; Conflict unless the job is running.
    """
    job = get_visible(session, principal, job_id)
    principal.require_own(job.submitted_by, f"reporting a checkpoint of job {job.id}")
    session.refresh(job, with_for_update=True)  # the control loop may be finishing it now
    if job.state != JobState.RUNNING.value:
        raise Conflict(f"job {job.id} is {job.state}; only a running job can report a checkpoint")
    job.last_checkpoint_at = max(job.last_checkpoint_at or 0.0, at)
    events.record_for_job(
        session,
        job,
        JobEventReason.CHECKPOINTED,
        f"checkpoint reported by {principal.name} (attempt {job.attempt})",
        at,
    )
    return job
