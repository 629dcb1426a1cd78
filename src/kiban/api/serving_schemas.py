"""What the API returns for inference services (camelCase JSON)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import Field

from kiban.api.schemas import ApiModel
from kiban.domain.rollout import RevisionState
from kiban.domain.states import JobState
from kiban.services.service_status import ServiceStatus
from kiban.serving.autoscaler import ScaleDecision
from kiban.serving.capacity import replica_concurrency


class ScalingOut(ApiModel):
    """The autoscaler's last decision for a revision and the numbers behind it. The values are
    of ``metric``: requests in flight, requests/s, or for cpu the replicas' CPU use in
    requests' worth (1.0: one replica's whole CPU request)."""

    metric: str
    stable_value: float
    """Averaged over the stable window (60 s)."""
    panic_value: float
    """Averaged over the panic window (6 s)."""
    per_replica: float
    """What one replica should carry."""
    panicking: bool
    desired_replicas: int
    note: str


def scaling_out(decision: ScaleDecision) -> ScalingOut:
    return ScalingOut(
        metric=decision.metric,
        stable_value=round(decision.stable_value, 4),
        panic_value=round(decision.panic_value, 4),
        per_replica=round(decision.per_replica, 4),
        panicking=decision.panicking,
        desired_replicas=decision.desired,
        note=decision.note,
    )


class ServiceRevisionOut(ApiModel):
    """A revision: its state (Loading, Ready, Failed with the loader's message, Retired), its
    share of traffic and its replicas."""

    name: str
    number: int
    state: RevisionState
    message: str
    role: Literal["stable", "canary", ""]
    traffic_percent: int
    desired_replicas: int
    ready_replicas: int
    replica_concurrency: int
    """Requests the router sends one of its replicas at once (0: no cap); a canary whose model
    server batches differently has its own."""
    created_at: float
    ready_at: float | None
    scaling: ScalingOut | None = None
    """None while the revision does not scale (not taking traffic, failed, retired)."""


class ServiceReplicaOut(ApiModel):
    """A replica: the job that runs it (``kiban describe JOB`` tells more), and whether the
    router sends it requests. ``reason``: why it does not serve yet, its job's pending reason or,
    while it runs, what it waits for (its image being pulled)."""

    job: str
    revision: str
    state: JobState
    node: str | None
    ready: bool
    reason: str | None


class TrafficOut(ApiModel):
    """What the router measured for the service lately (a sliding window)."""

    requests: int
    rps: float
    in_flight: int
    queued: int
    p50_ms: float | None
    p99_ms: float | None


class ServiceOut(ApiModel):
    """An inference service. ``url`` is its stable address on the router: requests to
    ``url + /openai/v1/...`` or ``url + /v2/...`` reach a ready replica."""

    name: str
    tenant: str
    state: Literal["Ready", "Loading", "ScaledToZero", "Failed", "Deleting"]
    url: str | None
    queue: str
    priority_class: str | None
    runtime: str
    model: str
    task: Literal["auto", "text_generation", "text_embedding"]
    """What the model does (``auto``: as its configuration says); the dashboard offers a chat
    box for text generation and a try-it box for embeddings."""
    min_replicas: int
    max_replicas: int
    scale_metric: str
    scale_target: float | None
    replica_concurrency: int
    """Requests the router sends one replica at once, the rest waiting in its queue (0: no
    cap): containerConcurrency, or for kiban's model server twice its batch size."""
    timeout_s: float
    public: bool
    traffic: dict[str, int]
    revisions: list[ServiceRevisionOut]
    replicas: list[ServiceReplicaOut]
    created_at: float
    updated_at: float
    stats: TrafficOut | None = None
    warnings: list[str] = Field(default_factory=list)


def service_out(
    status: ServiceStatus,
    url: str | None,
    stats: TrafficOut | None = None,
    scaling: Mapping[int, ScaleDecision] | None = None,
) -> ServiceOut:
    """``scaling``: the autoscaler's last decision by revision number."""
    spec, row = status.spec, status.row
    decisions = scaling or {}
    return ServiceOut(
        name=row.name,
        tenant=row.tenant,
        state=status.state,
        url=url,
        queue=spec.queue,
        priority_class=spec.priority_class,
        runtime=spec.runtime,
        model=spec.model_name,
        task=spec.task,
        min_replicas=spec.min_replicas,
        max_replicas=spec.max_replicas,
        scale_metric=spec.scale_metric,
        scale_target=spec.scale_target,
        replica_concurrency=replica_concurrency(spec),
        timeout_s=spec.timeout_s,
        public=spec.public,
        traffic=status.traffic,
        revisions=[
            ServiceRevisionOut(
                name=r.name,
                number=r.number,
                state=r.state,
                message=r.message,
                role=r.role,
                traffic_percent=r.traffic_percent,
                desired_replicas=r.desired_replicas,
                ready_replicas=r.ready_replicas,
                replica_concurrency=r.replica_concurrency,
                created_at=r.created_at,
                ready_at=r.ready_at,
                scaling=scaling_out(decisions[r.number]) if r.number in decisions else None,
            )
            for r in status.revisions
        ],
        replicas=[
            ServiceReplicaOut(
                job=r.job_id,
                revision=r.revision,
                state=r.state,
                node=r.node,
                ready=r.ready,
                reason=r.reason,
            )
            for r in status.replicas
        ],
        created_at=row.created_at,
        updated_at=row.updated_at,
        stats=stats,
    )
