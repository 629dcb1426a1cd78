"""What the service controller does to one inference service in a pass, decided as a pure function.

``plan_service(view, probes, traffic, now)`` reads a service as the store had it (``ServiceView``,
plain values read in one short transaction), what its replicas answered (``Probes``: readiness,
addresses, model-loader messages, gathered with no session open) and the router's traffic
(``Traffic``), and returns a ``ServicePlan``: the replicas that ended and why, revisions that
failed or became Ready, the rollout step (promotion, a failed canary dropped), each revision's
replica count with the jobs to cancel and the slots to fill, and the route to publish. The
controller applies it in a short transaction of its own (``serving_controller``).

Step by step, as the controller has always done it:

1. Account for replica jobs that ended: a replica that never became ready counts as a crash;
   one whose model failed to load (its log's ``KIBAN_LOAD_FAILED:`` line), whose container
   could not start, or a third crash, fails the revision, and traffic stays where it was.
2. A revision with a ready replica is Ready; a canary at 100% that is Ready becomes stable.
3. Each live target revision's replica count comes from the autoscaler.
4. Replicas beyond it are cancelled (pending ones first, then the newest), missing ones made.
5. The route: the traffic split and the endpoints of the revisions that take traffic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from kiban.domain.rollout import (
    RevisionState,
    TrafficTargets,
    revision_name,
    serving_revisions,
    traffic_split,
)
from kiban.domain.service import ServiceSpec
from kiban.domain.states import JobState
from kiban.executors.base import ReplicaRef, cannot_start
from kiban.serving.autoscaler import ScaleDecision, ScalerState, decide
from kiban.serving.capacity import replica_concurrency, scaling_policy
from kiban.serving.cpu_use import CpuSample
from kiban.serving.router.table import Endpoint, Route
from kiban.serving.router.traffic import ConcurrencySample

MAX_CRASHES = 3  # replicas of a revision that exit before ever being ready: then it failed
PROMOTED_BY = "rollout reached 100%"


# -- what the controller observed ----------------------------------------------------------------
@dataclass(frozen=True)
class ReplicaView:
    """A replica of a revision as stored: its row's flags and its job."""

    job_id: str
    revision_id: int
    index: int
    job_state: JobState
    job_message: str | None = None
    master_port: int | None = None
    launched: ReplicaRef | None = None
    """The job's active replica of its current attempt, once launched."""
    ready: bool = False
    ever_ready: bool = False
    ended: bool = False
    """Whether its job's end was accounted already."""


@dataclass(frozen=True)
class RevisionView:
    """A revision as stored, with its own spec (the one its replicas run)."""

    id: int
    number: int
    state: RevisionState
    spec: ServiceSpec
    crashes: int = 0
    ready_at: float | None = None
    desired_replicas: int = 0


@dataclass(frozen=True)
class ServiceView:
    """A service as one read transaction saw it: its rollout, revisions and replicas."""

    id: int
    name: str
    tenant: str
    spec: ServiceSpec
    revisions: tuple[RevisionView, ...]  # by number
    replicas: tuple[ReplicaView, ...]  # by index
    stable_revision: int | None = None
    canary_revision: int | None = None
    canary_percent: int = 0
    deleted: bool = False

    @property
    def targets(self) -> TrafficTargets:
        return TrafficTargets(self.stable_revision, self.canary_revision, self.canary_percent)

    def replicas_of(self, revision: RevisionView) -> list[ReplicaView]:
        return [r for r in self.replicas if r.revision_id == revision.id]

    def scaling_candidates(self) -> list[RevisionView]:
        """The revisions whose replica count the autoscaler may decide this pass (the others
        get none): live targets of a service not deleted."""
        if self.deleted:
            return []
        targets = (self.stable_revision, self.canary_revision)
        return [r for r in self.revisions if r.state.live and r.number in targets]

    def ended_unexplained(self) -> list[ReplicaView]:
        """Replicas that ended before ever being ready, not yet accounted, of a revision that
        a failure would fail: the ones whose logs may say why the model did not load."""
        loading = {r.id for r in self.revisions if r.state.live and r.ready_at is None}
        return [
            r
            for r in self.replicas
            if r.revision_id in loading
            and not r.ended
            and r.job_state.terminal
            and r.job_state is not JobState.CANCELLED
            and not r.ever_ready
        ]


@dataclass(frozen=True)
class Probes:
    """What the replicas answered, gathered with no session open."""

    addresses: Mapping[str, str] = field(default_factory=dict)
    """Job id to where the control plane reaches its model server (running replicas)."""
    ports: Mapping[str, int] = field(default_factory=dict)
    """Job id to the TCP port its model server serves (also when reached on a Unix socket)."""
    ready: Mapping[str, bool] = field(default_factory=dict)
    """Job id to whether its readiness path answered 200 (within the probe's timeout)."""
    load_failures: Mapping[str, str] = field(default_factory=dict)
    """Job id to the model loader's message in its log, for ended replicas that wrote one."""


@dataclass(frozen=True)
class RevisionTraffic:
    """The autoscaler's inputs for one revision: the router's samples, the requests waiting,
    the replicas' CPU use (None: not measured) and the scaler's state from the last pass."""

    samples: tuple[ConcurrencySample, ...] = ()
    waiting: int = 0
    cpu: tuple[CpuSample, ...] | None = None
    scaler: ScalerState = field(default_factory=ScalerState)


@dataclass(frozen=True)
class Traffic:
    """The router's view of a service's revisions (by number), on the router's clock."""

    now: float
    revisions: Mapping[int, RevisionTraffic] = field(default_factory=dict)


# -- what the plan says --------------------------------------------------------------------------
class FailureReason(StrEnum):
    """Why a revision failed."""

    MODEL_LOAD = "ModelLoadFailed"  # its replica's log said the model did not load
    CANNOT_START = "CannotStart"  # its container could not start (image, configuration)
    CRASHES = "Crashed"  # MAX_CRASHES replicas exited before becoming ready
    REFUSED = "Refused"  # a replica's job was refused at submission (the policy changed)


@dataclass(frozen=True)
class RevisionFailure:
    revision: int
    reason: FailureReason
    message: str
    """The failure as the revision's message shows it."""


@dataclass(frozen=True)
class ReplicaUpdate:
    """A replica row's flags after this pass (only rows whose flags change)."""

    job_id: str
    ready: bool
    ever_ready: bool
    ended: bool


@dataclass(frozen=True)
class RevisionUpdate:
    """A revision's counters after this pass (every revision of the service)."""

    id: int
    number: int
    crashes: int
    desired_replicas: int


@dataclass(frozen=True)
class Launch:
    """A replica job to make: revision (by id and number) and its slot."""

    revision_id: int
    revision: int
    index: int


@dataclass(frozen=True)
class Scaling:
    """One revision's replica count: what it should have, what it has (jobs not ended), and
    the autoscaler's decision when it made one."""

    revision: int
    desired: int
    live: int
    decision: ScaleDecision | None = None

    @property
    def change(self) -> int:
        """Replicas to add (positive) or to remove (negative)."""
        return self.desired - self.live


@dataclass(frozen=True)
class RevisionRoute:
    """A revision that takes traffic, with the port its replicas serve on (once known): it
    gets its own address on executors that give revisions one."""

    name: str
    port: int | None


@dataclass(frozen=True)
class ServicePlan:
    """What to do to one service this pass."""

    service_id: int
    replicas: tuple[ReplicaUpdate, ...] = ()
    revisions: tuple[RevisionUpdate, ...] = ()
    crashed: tuple[str, ...] = ()
    """Replicas (job ids) that ended before ever being ready: each counts as a crash."""
    failed: tuple[RevisionFailure, ...] = ()
    became_ready: tuple[int, ...] = ()
    promote: bool = False
    """The canary at 100% is Ready: it becomes the stable revision."""
    drop_canary: bool = False
    """The canary failed while a stable revision serves: it takes no traffic any more."""
    scaling: tuple[Scaling, ...] = ()
    cancel: tuple[str, ...] = ()
    launch: tuple[Launch, ...] = ()
    remove: bool = False
    """The service was deleted and none of its replicas runs any more: it goes."""
    route: Route | None = None
    routed: tuple[RevisionRoute, ...] = ()
    forget: tuple[int, ...] = ()
    """Revisions whose autoscaler state is dropped (they keep no replicas)."""


def plan_service(view: ServiceView, probes: Probes, traffic: Traffic, now: float) -> ServicePlan:
    """Decide one pass over ``view`` (see the module's steps); reads nothing else."""
    work = _Pass(view)
    for revision in view.revisions:
        work.account_ended(revision, probes)
        work.observe_readiness(revision, probes, now)
    promote, drop_canary, targets = work.rollout()
    serving = serving_revisions(
        (r.number, work.states[r.number].value, work.has_ready(r)) for r in view.revisions
    )
    split = traffic_split(targets, serving) if not view.deleted else {}
    scaling = [work.scale(revision, targets, traffic) for revision in view.revisions]
    plan = ServicePlan(
        service_id=view.id,
        replicas=tuple(
            ReplicaUpdate(r.job_id, *work.flags[r.job_id])
            for r in view.replicas
            if tuple(work.flags[r.job_id]) != (r.ready, r.ever_ready, r.ended)
        ),
        revisions=tuple(
            RevisionUpdate(r.id, r.number, work.crashes[r.number], s.desired)
            for r, s in zip(view.revisions, scaling, strict=True)
        ),
        crashed=tuple(work.crashed),
        failed=tuple(work.failed),
        became_ready=tuple(work.became_ready),
        promote=promote,
        drop_canary=drop_canary,
        scaling=tuple(scaling),
        cancel=tuple(work.cancel),
        launch=tuple(work.launch),
        # A deleted service's split is empty: none of its revisions is routed, so their own
        # addresses are removed (even when the service itself is removed).
        routed=tuple(_revision_route(view, number) for number in sorted(split)),
        forget=tuple(work.forget),
    )
    if view.deleted:
        return replace(plan, remove=all(r.job_state.terminal for r in view.replicas))
    return replace(plan, route=_route(view, split, probes, work.flags))


class _Pass:
    """What ``plan_service`` works out step by step: the flags, states and counters as the
    pass changes them, and what it decided so far."""

    def __init__(self, view: ServiceView) -> None:
        self.view = view
        self.flags = {r.job_id: [r.ready, r.ever_ready, r.ended] for r in view.replicas}
        self.states = {r.number: r.state for r in view.revisions}
        self.crashes = {r.number: r.crashes for r in view.revisions}
        self.ready_at = {r.number: r.ready_at for r in view.revisions}
        self.crashed: list[str] = []
        self.failed: list[RevisionFailure] = []
        self.became_ready: list[int] = []
        self.cancel: list[str] = []
        self.launch: list[Launch] = []
        self.forget: list[int] = []

    def has_ready(self, revision: RevisionView) -> bool:
        return any(self.flags[r.job_id][0] for r in self.view.replicas_of(revision))

    def account_ended(self, revision: RevisionView, probes: Probes) -> None:
        """Step 1: replicas whose jobs ended; a crash may fail a revision that never served."""
        number = revision.number
        for replica in self.view.replicas_of(revision):
            flags = self.flags[replica.job_id]
            if flags[2] or not replica.job_state.terminal:
                continue
            flags[0], flags[2] = False, True
            if replica.job_state is JobState.CANCELLED or flags[1]:
                continue
            self.crashed.append(replica.job_id)
            self.crashes[number] += 1
            if not self.states[number].live or self.ready_at[number] is not None:
                continue
            failure = _failure(replica, probes, self.crashes[number])
            if failure is not None:
                self.states[number] = RevisionState.FAILED
                self.failed.append(RevisionFailure(number, *failure))

    def observe_readiness(self, revision: RevisionView, probes: Probes, now: float) -> None:
        """Step 2: the probes' answers; a loading revision with a ready replica is Ready."""
        for replica in self.view.replicas_of(revision):
            flags = self.flags[replica.job_id]
            flags[0] = False
            if replica.job_id in probes.addresses:
                answered = probes.ready.get(replica.job_id, False)
                flags[0], flags[1] = answered, flags[1] or answered
        number = revision.number
        if self.states[number] is RevisionState.LOADING and self.has_ready(revision):
            self.states[number], self.ready_at[number] = RevisionState.READY, now
            self.became_ready.append(number)

    def rollout(self) -> tuple[bool, bool, TrafficTargets]:
        """Step 2 still: whether the canary is promoted, whether a failed canary is dropped,
        and the targets after both."""
        stable, canary = self.view.stable_revision, self.view.canary_revision
        percent = self.view.canary_percent
        states = self.states
        promote = canary is not None and percent >= 100 and states[canary] is RevisionState.READY
        if promote:
            if (
                stable is not None
                and stable != canary
                and states[stable] is not RevisionState.FAILED
            ):
                states[stable] = RevisionState.RETIRED  # as promoting retires it
            stable, canary, percent = canary, None, 0
        drop = canary is not None and states[canary] is RevisionState.FAILED and stable is not None
        if drop:
            canary, percent = None, 0
        return promote, drop, TrafficTargets(stable, canary, percent)

    def scale(self, revision: RevisionView, targets: TrafficTargets, traffic: Traffic) -> Scaling:
        """Steps 3 and 4: the revision's replica count, and the jobs to cancel or make."""
        number = revision.number
        replicas = self.view.replicas_of(revision)
        live = [r for r in replicas if not r.job_state.terminal]
        decision: ScaleDecision | None = None
        if (
            self.view.deleted
            or not self.states[number].live
            or number not in (targets.stable, targets.canary)
        ):
            self.forget.append(number)
            desired = 0
        else:
            ready = sum(self.flags[r.job_id][0] for r in replicas)
            decision = _decide(self.view, revision, traffic, ready)
            desired = decision.desired
            if self.states[number] is RevisionState.LOADING:
                # Knative's initial scale of 1: a new revision shows that its model loads (and
                # a canary gets a replica to be ready with) before it may scale to zero.
                desired = max(desired, 1)
        if len(live) > desired:
            # Pending ones first, then the newest: the ones that serve longest are kept.
            extra = sorted(live, key=lambda r: (r.job_state is not JobState.PENDING, -r.index))
            for replica in extra[: len(live) - desired]:
                # Out of the router's choices in this pass's route, before its process may be
                # stopped: a new request sent to it then would fail. Its in-flight ones finish.
                self.flags[replica.job_id][0] = False
                if replica.job_state is not JobState.STOPPING:
                    self.cancel.append(replica.job_id)
        used = {r.index for r in replicas}
        index = 0
        for _ in range(desired - len(live)):
            while index in used:
                index += 1
            used.add(index)
            self.launch.append(Launch(revision.id, number, index))
        return Scaling(number, desired, len(live), decision)


def _revision_route(view: ServiceView, number: int) -> RevisionRoute:
    """A revision that takes traffic, with the first port one of its replicas was given."""
    (revision,) = [r for r in view.revisions if r.number == number]
    ports = (r.master_port for r in view.replicas_of(revision) if r.master_port is not None)
    return RevisionRoute(revision_name(view.name, number), next(ports, None))


def _failure(
    replica: ReplicaView, probes: Probes, crashes: int
) -> tuple[FailureReason, str] | None:
    """Whether a replica that ended unready fails its revision, why, and the message."""
    loaded = probes.load_failures.get(replica.job_id)
    if loaded is not None:
        return FailureReason.MODEL_LOAD, loaded
    if cannot_start(replica.job_message):
        return FailureReason.CANNOT_START, replica.job_message or ""
    if crashes >= MAX_CRASHES:
        return FailureReason.CRASHES, (
            f"{crashes} replicas exited before becoming ready; the last: "
            f"{replica.job_message or replica.job_state.value}"
        )
    return None


def _decide(
    view: ServiceView, revision: RevisionView, traffic: Traffic, ready: int
) -> ScaleDecision:
    policy = scaling_policy(view.spec.with_revision(revision.spec))
    seen = traffic.revisions.get(revision.number, RevisionTraffic())
    return decide(
        policy,
        seen.scaler,
        seen.samples,
        ready_replicas=ready,
        waiting=seen.waiting,
        now=traffic.now,
        cpu=seen.cpu if policy.metric == "cpu" else None,
    )


def _route(
    view: ServiceView, split: dict[int, int], probes: Probes, flags: dict[str, list[bool]]
) -> Route:
    by_number = {r.number: r for r in view.revisions}
    endpoints = tuple(
        Endpoint(
            revision=revision_name(view.name, number),
            address=probes.addresses[replica.job_id],
            ready=flags[replica.job_id][0],
        )
        for number in split
        for replica in view.replicas_of(by_number[number])
        if replica.job_id in probes.addresses
    )
    return Route(
        tenant=view.tenant,
        service=view.name,
        traffic={revision_name(view.name, n): share for n, share in split.items()},
        endpoints=endpoints,
        timeout_s=view.spec.timeout_s,
        public=view.spec.public,
        max_concurrency_per_endpoint=replica_concurrency(view.spec),
        concurrency_by_revision={
            revision_name(view.name, number): replica_concurrency(
                view.spec.with_revision(by_number[number].spec)
            )
            for number in split
        },
    )
