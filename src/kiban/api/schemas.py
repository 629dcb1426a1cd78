"""What the API returns (camelCase JSON), built from store rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema
from pydantic.alias_generators import to_camel

from kiban.api.job_view import JobView
from kiban.domain.declarations import DEFAULT_TENANT
from kiban.domain.jobspec import DNS_LABEL
from kiban.domain.runtime_estimate import RuntimeEstimate
from kiban.domain.states import JobState, ReplicaState
from kiban.health.conditions import CheckType, ConditionStatus
from kiban.scheduler.reasons import awaiting_pass
from kiban.services.jobs import job_demand
from kiban.services.policy import PolicyChange, PolicyRecord
from kiban.services.queue_status import FlavorStatus, QueueStatus
from kiban.store.models import Event, PolicyVersion, Replica, Tenant
from kiban.store.models_nodes import Node, NodeCondition

NAME_FIELD = Field(json_schema_extra={"pattern": DNS_LABEL.pattern})
"""A new tenant's or queue's name: a DNS label (the services check it and say what is wrong)."""


class ApiModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class ProblemOut(ApiModel):
    """One thing wrong with the input: where (``spec.tasks[0].replicas``; "" for the whole
    body) and what."""

    field: str
    message: str


class ErrorOut(ApiModel):
    """An error: its HTTP status, a message for people, and the input fields it is about
    (``problems``, empty when it is not about input)."""

    status: int
    message: str
    problems: list[ProblemOut]


class ErrorBody(ApiModel):
    """What every error answer carries: ``{"error": {"status", "message", "problems"}}``."""

    error: ErrorOut


class ReasonOut(ApiModel):
    code: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class ReplicaOut(ApiModel):
    task: str
    index: int
    rank: int
    node: str
    gpu_ids: list[int]
    state: ReplicaState
    pid: int | None
    exit_code: int | None
    started_at: float | None
    finished_at: float | None
    waiting: str | None = None
    """While it runs, what it waits for as its executor tells (its image being pulled)."""


class RuntimeEstimateOut(ApiModel):
    """An estimated run time: seconds, the history it came from (``user+name (12 runs)``), how
    many runs that is, and how far to trust it (0..1). It plans; it never stops a job."""

    seconds: float
    basis: str
    samples: int
    confidence: float


class JobOut(ApiModel):
    """A job. While it waits: its reason, its places in its queue and in the cluster (1 = next),
    and ``eta``, its forecast start (UNIX seconds; None when the forecast has none). ``standing``
    is its tenant's fair-share standing (decayed usage per unit of weight; lower goes first).
    ``warnings``: only in the answer to a submission, the fields kiban ignored."""

    id: str
    name: str
    tenant: str
    queue: str
    state: JobState
    priority: int
    attempt: int
    submitted_at: float
    submitted_by: str | None = None
    admitted_at: float | None
    started_at: float | None
    finished_at: float | None
    reason: ReasonOut | None
    queue_position: int | None
    cluster_position: int | None = None
    eta: float | None = None
    standing: float | None = None
    preempted_by: str | None = None
    last_checkpoint_at: float | None = None
    message: str | None
    master_port: int | None
    gpus: int = 0
    replica_count: int = 0
    spec: dict[str, Any] | None = None
    replicas: list[ReplicaOut] | None = None
    warnings: list[str] = Field(default_factory=list)
    array_id: str | None = None
    """The array it is an index of (``kiban.services.job_arrays``), and which index."""
    array_index: int | None = None
    estimated_runtime: RuntimeEstimateOut | None = None
    """For a waiting or running job with no maxRuntime: its run time estimated from finished
    jobs like it (``kiban.domain.runtime_estimate``); only in the one-job document."""
    eta_estimated: bool = False
    """``eta`` rests on estimated run times of jobs with no maxRuntime, not only maxRuntimes."""
    executor_limits: list[str] = Field(default_factory=list)
    """What the executor cannot do for this job while it has not ended (its checkpoints are
    not noticed, its logs not kept); only in the one-job document."""


class EventOut(ApiModel):
    id: int
    type: Literal["Normal", "Warning"]
    reason: str
    message: str
    at: float


class FlavorUsageOut(ApiModel):
    """A queue's quota and use of one flavor, in GPUs; see ``kiban.services.quota_ledger`` for
    what borrowed, lent and over quota mean. Limits are None when the policy sets none."""

    flavor: str
    nominal: int | None
    borrowing_limit: int | None
    lending_limit: int | None
    used: int
    borrowed: int
    lent: int
    pending_jobs: int
    pending_gpus: int
    over_quota: int = 0
    """Use beyond what the policy lets the queue hold now, lent by no one (after a quota was
    lowered under running jobs): given back as its jobs end, or reclaimed by preemption."""


class QueueOut(ApiModel):
    """A queue: nominal GPUs per flavor (``{"h100": {"gpu": 16}}``; None: no quota) and use.

    ``flavors`` gives per flavor nominal, used, borrowed, lent, over quota and pending;
    ``borrowed``, ``lent`` and ``overQuota`` are their sums. ``usage`` is the tenant's decayed
    usage (weighted resource-seconds; ``usageGpuHours`` the same in hours) and ``standing`` its
    usage per unit of weight. ``scavenger``: the policy declares it ``scavenger: true``, its jobs
    run on idle capacity only and any job that needs their nodes preempts them.
    """

    name: str
    tenant: str
    cohort: str | None
    quota: dict[str, dict[str, int]] | None
    borrowing_limit: dict[str, dict[str, int]]
    lending_limit: dict[str, dict[str, int]]
    strategy: str
    fair_share_weight: float
    gpu_quota: int | None  # all flavors' nominal GPUs together
    gpus_in_use: int
    pending: int
    running: int
    pending_gpus: int = 0
    borrowed: int = 0
    lent: int = 0
    over_quota: int = 0
    flavors: list[FlavorUsageOut] = Field(default_factory=list)
    usage: float = 0.0
    usage_gpu_hours: float = 0.0
    standing: float = 0.0
    scavenger: bool = False


class ConditionSummaryOut(ApiModel):
    """A health check's condition on a node whose status is not False (``kiban describe node``
    has its message, history and actions)."""

    type: CheckType
    status: ConditionStatus
    reason: str


class NodeOut(ApiModel):
    """A node. ``conditions``: its health checks' conditions that are not False (a problem, or
    Unknown); ``cordonSource``: who cordoned it, ``admin`` or ``remediation`` (kiban's health
    rules), "" when it is not cordoned."""

    name: str
    gpus: int
    gpus_in_use: int
    cpu_millis: int
    memory: int
    labels: dict[str, str]
    healthy: bool
    health_message: str
    cordoned: bool
    cordon_source: str = ""
    conditions: list[ConditionSummaryOut] = Field(default_factory=list)
    extended: dict[str, int] = Field(default_factory=dict)  # extended resources it advertises


class TenantOut(ApiModel):
    name: str
    created_at: float


class QueueIn(ApiModel):
    """A queue to add to the policy: the keys of an entry of the policy's ``queues``."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    name: Annotated[str, NAME_FIELD]
    tenant: Annotated[str, NAME_FIELD]
    quota: dict[str, Any] | None = None
    cohort: str | None = None
    borrowing_limit: dict[str, Any] | None = None
    lending_limit: dict[str, Any] | None = None
    strategy: str | None = None
    fair_share_weight: float | None = None
    scavenger: bool | None = None  # its jobs run on idle capacity only (see QueueOut)

    def entry(self) -> dict[str, Any]:
        """The policy entry (camelCase keys), without the keys left out."""
        return self.model_dump(by_alias=True, exclude_none=True)


class PolicyOut(ApiModel):
    """The policy in force: the document as written, and with every default filled in."""

    version: int  # 0: the built-in default, never applied
    created_at: float | None
    created_by: str | None
    document: dict[str, Any]
    effective: dict[str, Any]


class PolicyVersionOut(ApiModel):
    version: int
    created_at: float
    created_by: str
    document: dict[str, Any]


class DrainStepOut(ApiModel):
    """A queue left holding more GPUs of a flavor than the policy lets it (``overQuota`` more
    than ``allowed``), and how they come back: ``reclaimable`` (a queue of its cohort takes
    them back by preemption when it needs its quota), ``by`` (the latest its jobs' maxRuntime
    gives them back; None when some job has none)."""

    queue: str
    flavor: str
    in_use: int
    allowed: int
    over_quota: int
    cohort: str | None
    reclaimable: bool
    by: float | None
    message: str


class PolicyChangeOut(ApiModel):
    """What applying a policy did: the version in force, and the queues it changed."""

    version: int
    changed: bool
    created: list[str]
    updated: list[str]
    removed: list[str]
    drain_plan: list[DrainStepOut]
    message: str
    summary: str  # the message without the drain plan


class TenantIn(ApiModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    name: Annotated[str, NAME_FIELD]


class TokenIn(ApiModel):
    """A member's token; ``name`` says whose (a user name): printable characters, not only
    spaces, at most 128 (``format: printable``: Python's ``str.isprintable``)."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    name: Annotated[
        str,
        Field(json_schema_extra={"minLength": 1, "maxLength": 128, "pattern": r"\S"}),
        WithJsonSchema({"type": "string", "format": "printable"}),
    ]
    role: Literal["admin", "tenant-admin", "member", "viewer"] = "member"
    expires: Annotated[
        str | None,
        Field(
            pattern=r"^[1-9][0-9]{0,8}(s|m|h|d|w)?$",
            description="how long from now it lives: 30d, 12h, 90m, 2w, or seconds; none: no end",
        ),
    ] = None


class TokenOut(ApiModel):
    name: str
    tenant: str
    token: str
    id: int | None = None
    role: str = "member"
    expires_at: float | None = None


class WhoAmI(ApiModel):
    name: str
    tenant: str | None
    is_admin: bool
    job_id: str | None = None  # a job's own token: that job
    role: str = "member"
    member: str | None = None  # the token's named member


def job_out(
    job: JobView,
    replicas: list[Replica] | None = None,
    with_spec: bool = False,
    standing: float | None = None,
    estimate: RuntimeEstimate | None = None,
    executor_limits: Sequence[str] = (),
) -> JobOut:
    """The job as the API shows it; forecasts and positions only while it is pending (the
    store keeps the last ones after it starts)."""
    demand = job_demand(job)
    waiting = job.state == JobState.PENDING.value
    reason = None
    if job.reason_code:
        reason = ReasonOut(
            code=job.reason_code, message=job.reason_message or "", details=job.reason_details or {}
        )
    elif job.state == JobState.PENDING.value:
        backlog = awaiting_pass(job.queue)
        reason = ReasonOut(
            code=backlog.code.value, message=backlog.message, details=backlog.details
        )
    return JobOut(
        id=job.id,
        name=job.name,
        tenant=job.tenant,
        queue=job.queue,
        state=JobState(job.state),
        priority=job.priority,
        attempt=job.attempt,
        submitted_at=job.submitted_at,
        submitted_by=job.submitted_by,
        admitted_at=job.admitted_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        reason=reason,
        queue_position=job.queue_position if waiting else None,
        cluster_position=job.cluster_position if waiting else None,
        eta=job.eta if waiting else None,
        standing=standing,
        preempted_by=job.preempted_by,
        last_checkpoint_at=job.last_checkpoint_at,
        message=job.message,
        master_port=job.master_port,
        gpus=demand.gpus,
        replica_count=demand.replicas,
        spec=job.spec if with_spec else None,
        replicas=None if replicas is None else [replica_out(r) for r in replicas],
        array_id=job.array_id,
        array_index=job.array_index,
        estimated_runtime=None
        if estimate is None
        else RuntimeEstimateOut(
            seconds=estimate.seconds,
            basis=estimate.basis,
            samples=estimate.samples,
            confidence=estimate.confidence,
        ),
        eta_estimated=bool(waiting and job.eta is not None and job.eta_estimated),
        executor_limits=[] if JobState(job.state).terminal else list(executor_limits),
    )


def replica_out(r: Replica) -> ReplicaOut:
    return ReplicaOut(
        task=r.task,
        index=r.index,
        rank=r.rank,
        node=r.node,
        gpu_ids=list(r.gpu_ids or []),
        state=ReplicaState(r.state),
        pid=r.pid,
        exit_code=r.exit_code,
        started_at=r.started_at,
        finished_at=r.finished_at,
        waiting=r.waiting if r.state == "Running" else None,
    )


def event_out(e: Event) -> EventOut:
    return EventOut(
        id=e.id,
        type="Warning" if e.type == "Warning" else "Normal",
        reason=e.reason,
        message=e.message,
        at=e.at,
    )


def flavor_usage_out(f: FlavorStatus) -> FlavorUsageOut:
    return FlavorUsageOut(
        flavor=f.flavor,
        nominal=f.nominal,
        borrowing_limit=f.borrowing_limit,
        lending_limit=f.lending_limit,
        used=f.used,
        borrowed=f.borrowed,
        lent=f.lent,
        pending_jobs=f.pending_jobs,
        pending_gpus=f.pending_gpus,
        over_quota=f.over_quota,
    )


def queue_out(status: QueueStatus) -> QueueOut:
    q = status.queue
    return QueueOut(
        name=q.name,
        tenant=q.tenant,
        cohort=q.cohort,
        quota=q.quota,
        borrowing_limit=q.borrowing_limit or {},
        lending_limit=q.lending_limit or {},
        strategy=q.strategy,
        fair_share_weight=q.fair_share_weight,
        gpu_quota=q.gpu_quota,
        gpus_in_use=status.gpus_in_use,
        pending=status.pending_jobs,
        running=status.running_jobs,
        pending_gpus=status.pending_gpus,
        borrowed=status.borrowed,
        lent=status.lent,
        over_quota=status.over_quota,
        flavors=[flavor_usage_out(f) for f in status.flavors],
        usage=status.usage,
        usage_gpu_hours=status.usage / 3600,
        standing=status.standing,
        scavenger=status.scavenger,
    )


def node_out(n: Node, gpus_in_use: int, conditions: Sequence[NodeCondition] = ()) -> NodeOut:
    """The node as the API lists it; ``conditions``: those of its conditions to show."""
    return NodeOut(
        name=n.name,
        gpus=n.gpus,
        gpus_in_use=gpus_in_use,
        cpu_millis=n.cpu_millis,
        memory=n.memory,
        labels=dict(n.labels or {}),
        healthy=n.healthy,
        health_message=n.health_message,
        cordoned=n.cordoned,
        cordon_source=n.cordon_source or "",
        extended=dict(n.extended or {}),
        conditions=[
            ConditionSummaryOut(
                type=CheckType(c.type), status=ConditionStatus(c.status), reason=c.reason
            )
            for c in conditions
        ],
    )


def tenant_out(t: Tenant) -> TenantOut:
    return TenantOut(name=t.name, created_at=t.created_at)


def tenant_view(document: dict[str, Any], tenant: str | None) -> dict[str, Any]:
    """A policy document as a member of ``tenant`` may see it: its own queues and their
    cohorts; flavors, priority classes, fair share and topology (what a job file names)."""
    queues = [
        q
        for q in document.get("queues") or []
        if isinstance(q, dict) and q.get("tenant", DEFAULT_TENANT) == tenant
    ]
    parents = {
        c.get("name"): c.get("parent") for c in document.get("cohorts") or [] if isinstance(c, dict)
    }
    cohorts = set()
    for queue in queues:
        cohort = queue.get("cohort")
        while cohort is not None and cohort not in cohorts:  # the queue's cohort and its tree
            cohorts.add(cohort)
            cohort = parents.get(cohort)
    view = {key: value for key, value in document.items() if key not in ("queues", "cohorts")}
    if "queues" in document:
        view["queues"] = queues
    if "budgets" in document:  # its own tenant's budgets only
        budgets = document["budgets"] or []
        view["budgets"] = [b for b in budgets if isinstance(b, dict) and b.get("tenant") == tenant]
    names = {q.get("name") for q in queues}
    if isinstance(document.get("flavors"), list):  # a flavor's allowed queues: only its own
        view["flavors"] = [
            {**f, "queues": [n for n in f["queues"] if n in names]}
            if isinstance(f, dict) and isinstance(f.get("queues"), list)
            else f
            for f in document["flavors"]
        ]
    if "cohorts" in document:
        view["cohorts"] = [
            c for c in document["cohorts"] or [] if isinstance(c, dict) and c.get("name") in cohorts
        ]
    return view


def policy_out(record: PolicyRecord, *, tenant: str | None = None, admin: bool = True) -> PolicyOut:
    """The policy; a member sees only its tenant's queues (``tenant_view``)."""
    document = record.document
    effective = record.policy.model_dump(mode="json", by_alias=True)
    if not admin:
        document, effective = tenant_view(document, tenant), tenant_view(effective, tenant)
    return PolicyOut(
        version=record.version,
        created_at=record.created_at,
        created_by=record.created_by,
        document=document,
        effective=effective,
    )


def policy_version_out(row: PolicyVersion) -> PolicyVersionOut:
    return PolicyVersionOut(
        version=row.version,
        created_at=row.created_at,
        created_by=row.created_by,
        document=row.document,
    )


def policy_change_out(change: PolicyChange) -> PolicyChangeOut:
    return PolicyChangeOut(
        version=change.version,
        changed=change.changed,
        created=list(change.created),
        updated=list(change.updated),
        removed=list(change.removed),
        drain_plan=[
            DrainStepOut(
                queue=s.queue,
                flavor=s.flavor,
                in_use=s.in_use,
                allowed=s.allowed,
                over_quota=s.over_quota,
                cohort=s.cohort,
                reclaimable=s.reclaimable,
                by=s.by,
                message=str(s),
            )
            for s in change.drain
        ],
        message=change.message,
        summary=change.summary,
    )
