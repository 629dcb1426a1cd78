"""What the service controller decides for one service, case by case: readiness and rollouts,
failed revisions, replica counts, deletion, routes (``plan_service``, a pure function)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from kiban.control.serving_plan import (
    FailureReason,
    Probes,
    ReplicaView,
    RevisionTraffic,
    RevisionView,
    ServicePlan,
    ServiceView,
    Traffic,
    plan_service,
)
from kiban.domain.rollout import RevisionState
from kiban.domain.service import ServiceSpec, parse_service_submission
from kiban.domain.states import JobState
from kiban.executors.base import CANNOT_START

NOW = 100.0
LOADING, READY, FAILED = RevisionState.LOADING, RevisionState.READY, RevisionState.FAILED
RUNNING, PENDING, STOPPING = JobState.RUNNING, JobState.PENDING, JobState.STOPPING
CANCELLED, CRASHED = JobState.CANCELLED, JobState.FAILED


def spec(**fields: Any) -> ServiceSpec:
    body = {"model": {"name": "tiny", "storageUri": "file:///models/tiny"}, **fields}
    document = {"apiVersion": "kiban/v1", "kind": "Service", "metadata": {"name": "chat"}}
    return parse_service_submission({**document, "spec": body}).spec


class Service:
    """A service "chat" as the controller observes it, built step by step. Revision ids are
    ten times their numbers, so that a mix-up of the two shows."""

    def __init__(self, **fields: Any) -> None:
        self.spec = spec(**fields)
        self.revisions: list[RevisionView] = []
        self.replicas: list[ReplicaView] = []
        self.rollout: dict[str, Any] = {}

    def revision(self, number: int, state: RevisionState = LOADING, *, crashes: int = 0) -> Service:
        ready_at = 1.0 if state is READY else None
        self.revisions.append(
            RevisionView(number * 10, number, state, self.spec, crashes=crashes, ready_at=ready_at)
        )
        return self

    def replica(
        self,
        job: str,
        revision: int,
        index: int,
        state: JobState = RUNNING,
        *,
        message: str | None = None,
        ever_ready: bool = False,
        ended: bool = False,
    ) -> Service:
        self.replicas.append(
            ReplicaView(
                job_id=job,
                revision_id=revision * 10,
                index=index,
                job_state=state,
                job_message=message,
                master_port=9000,
                ready=ever_ready and state is RUNNING,
                ever_ready=ever_ready,
                ended=ended,
            )
        )
        return self

    def stable(self, number: int) -> Service:
        self.rollout["stable_revision"] = number
        return self

    def canary(self, number: int, percent: int) -> Service:
        self.rollout.update(canary_revision=number, canary_percent=percent)
        return self

    def deleted(self) -> Service:
        self.rollout["deleted"] = True
        return self

    def view(self) -> ServiceView:
        return ServiceView(
            id=7,
            name="chat",
            tenant="default",
            spec=self.spec,
            revisions=tuple(self.revisions),
            replicas=tuple(self.replicas),
            **self.rollout,
        )


def answers(ready: dict[str, bool] | None = None, **load_failures: str) -> Probes:
    """Running replicas probed: ``ready`` says which answered; ``load_failures`` by job id."""
    ready = ready or {}
    return Probes(
        addresses={job: f"{job}:9000" for job in ready},
        ready=ready,
        load_failures=load_failures,
    )


@dataclass(frozen=True)
class Outcome:
    """What matters of a plan, compared whole."""

    desired: dict[int, int]
    traffic: dict[str, int] | None = None  # None: no route (a deleted service)
    endpoints: dict[str, bool] = field(default_factory=dict)
    launch: tuple[tuple[int, int], ...] = ()  # (revision, slot)
    cancel: tuple[str, ...] = ()
    crashed: tuple[str, ...] = ()
    failed: tuple[tuple[int, FailureReason], ...] = ()
    ready: tuple[int, ...] = ()
    promote: bool = False
    drop_canary: bool = False
    remove: bool = False


def outcome(plan: ServicePlan) -> Outcome:
    route = plan.route
    return Outcome(
        desired={s.revision: s.desired for s in plan.scaling},
        traffic=None if route is None else dict(route.traffic),
        endpoints={} if route is None else {e.address: e.ready for e in route.endpoints},
        launch=tuple((launch.revision, launch.index) for launch in plan.launch),
        cancel=plan.cancel,
        crashed=plan.crashed,
        failed=tuple((f.revision, f.reason) for f in plan.failed),
        ready=plan.became_ready,
        promote=plan.promote,
        drop_canary=plan.drop_canary,
        remove=plan.remove,
    )


@dataclass
class PlanCase:
    id: str
    service: Service
    probes: Probes
    expected: Outcome
    waiting: dict[int, int] = field(default_factory=dict)  # requests waiting, by revision


def ready_pair() -> Service:
    """Revision 1 stable and serving, revision 2 a canary at 50% (loading)."""
    return (
        Service()
        .revision(1, READY)
        .revision(2)
        .stable(1)
        .canary(2, 50)
        .replica("a", 1, 0, ever_ready=True)
    )


PLAN_CASES = [
    # -- readiness and rollouts ------------------------------------------------------------------
    PlanCase(
        "a-new-service-starts-one-replica-and-routes-to-its-revision",
        Service().revision(1).canary(1, 100),
        answers(),
        Outcome(desired={1: 1}, traffic={"chat-00001": 100}, launch=((1, 0),)),
    ),
    PlanCase(
        "a-replica-that-answers-makes-its-revision-ready-and-the-rollout-completes",
        Service().revision(1).canary(1, 100).replica("a", 1, 0),
        answers({"a": True}),
        Outcome(
            desired={1: 1},
            traffic={"chat-00001": 100},
            endpoints={"a:9000": True},
            ready=(1,),
            promote=True,
        ),
    ),
    PlanCase(
        "a-replica-that-does-not-answer-yet-is-routed-unready",
        Service().revision(1).canary(1, 100).replica("a", 1, 0),
        answers({"a": False}),
        Outcome(desired={1: 1}, traffic={"chat-00001": 100}, endpoints={"a:9000": False}),
    ),
    PlanCase(
        "the-stable-revision-takes-everything-while-the-canary-loads",
        ready_pair().replica("b", 2, 0),
        answers({"a": True, "b": False}),
        Outcome(
            desired={1: 1, 2: 1},
            traffic={"chat-00001": 100},
            endpoints={"a:9000": True},
        ),
    ),
    PlanCase(
        "a-ready-canary-takes-its-share",
        ready_pair().replica("b", 2, 0),
        answers({"a": True, "b": True}),
        Outcome(
            desired={1: 1, 2: 1},
            traffic={"chat-00001": 50, "chat-00002": 50},
            endpoints={"a:9000": True, "b:9000": True},
            ready=(2,),
        ),
    ),
    PlanCase(
        "a-canary-at-100-that-is-ready-retires-the-stable-revision-and-its-replicas",
        Service()
        .revision(1, READY)
        .revision(2)
        .stable(1)
        .canary(2, 100)
        .replica("a", 1, 0, ever_ready=True)
        .replica("b", 2, 0),
        answers({"a": True, "b": True}),
        Outcome(
            desired={1: 0, 2: 1},
            traffic={"chat-00002": 100},
            endpoints={"b:9000": True},
            cancel=("a",),
            ready=(2,),
            promote=True,
        ),
    ),
    # -- replicas that ended, and failed revisions ----------------------------------------------
    PlanCase(
        "a-model-that-cannot-load-fails-the-canary-and-traffic-stays",
        ready_pair().replica("b", 2, 0, CRASHED),
        answers({"a": True}, b="no model files in /models/missing"),
        Outcome(
            desired={1: 1, 2: 0},
            traffic={"chat-00001": 100},
            endpoints={"a:9000": True},
            crashed=("b",),
            failed=((2, FailureReason.MODEL_LOAD),),
            drop_canary=True,
        ),
    ),
    PlanCase(
        "a-container-that-cannot-start-fails-its-revision-at-the-first-replica",
        ready_pair().replica("b", 2, 0, CRASHED, message=f"{CANNOT_START}: image not found"),
        answers({"a": True}),
        Outcome(
            desired={1: 1, 2: 0},
            traffic={"chat-00001": 100},
            endpoints={"a:9000": True},
            crashed=("b",),
            failed=((2, FailureReason.CANNOT_START),),
            drop_canary=True,
        ),
    ),
    PlanCase(
        "a-second-unexplained-crash-is-replaced-in-the-next-slot",
        Service()
        .revision(1, READY)
        .revision(2, crashes=1)
        .stable(1)
        .canary(2, 50)
        .replica("a", 1, 0, ever_ready=True)
        .replica("b", 2, 0, CRASHED),
        answers({"a": True}),
        Outcome(
            desired={1: 1, 2: 1},
            traffic={"chat-00001": 100},
            endpoints={"a:9000": True},
            launch=((2, 1),),
            crashed=("b",),
        ),
    ),
    PlanCase(
        "the-third-unexplained-crash-fails-the-revision",
        Service()
        .revision(1, READY)
        .revision(2, crashes=2)
        .stable(1)
        .canary(2, 50)
        .replica("a", 1, 0, ever_ready=True)
        .replica("b", 2, 0, CRASHED),
        answers({"a": True}),
        Outcome(
            desired={1: 1, 2: 0},
            traffic={"chat-00001": 100},
            endpoints={"a:9000": True},
            crashed=("b",),
            failed=((2, FailureReason.CRASHES),),
            drop_canary=True,
        ),
    ),
    PlanCase(
        "a-failed-first-revision-is-no-canary-to-drop-and-keeps-its-route",
        Service().revision(1).canary(1, 100).replica("a", 1, 0, CRASHED),
        answers(a="out of memory"),
        Outcome(
            desired={1: 0},
            traffic={"chat-00001": 100},
            crashed=("a",),
            failed=((1, FailureReason.MODEL_LOAD),),
        ),
    ),
    PlanCase(
        "a-cancelled-replica-and-one-that-was-ready-are-no-crashes",
        Service()
        .revision(1, READY)
        .stable(1)
        .replica("a", 1, 0, CANCELLED)
        .replica("b", 1, 1, CRASHED, ever_ready=True),
        answers(),
        Outcome(desired={1: 1}, traffic={"chat-00001": 100}, launch=((1, 2),)),
    ),
    PlanCase(
        "a-crash-counts-once-its-end-is-accounted",
        Service().revision(1, READY).stable(1).replica("a", 1, 0, CRASHED, ended=True),
        answers(),
        Outcome(desired={1: 1}, traffic={"chat-00001": 100}, launch=((1, 1),)),
    ),
    PlanCase(
        "an-unready-crash-of-a-revision-that-served-does-not-fail-it",
        Service().revision(1, READY, crashes=2).stable(1).replica("a", 1, 0, CRASHED),
        answers(a="out of memory"),
        Outcome(desired={1: 1}, traffic={"chat-00001": 100}, launch=((1, 1),), crashed=("a",)),
    ),
    # -- replica counts --------------------------------------------------------------------------
    PlanCase(
        "scaling-down-cancels-pending-ones-first-then-the-newest-and-unroutes-them",
        Service()
        .revision(1, READY)
        .stable(1)
        .replica("a", 1, 0, ever_ready=True)
        .replica("b", 1, 1, ever_ready=True)
        .replica("c", 1, 2, PENDING)
        .replica("d", 1, 3, STOPPING),
        answers({"a": True, "b": True}),
        Outcome(
            desired={1: 1},
            traffic={"chat-00001": 100},
            endpoints={"a:9000": True, "b:9000": False},
            cancel=("c", "b"),  # d is stopping already
        ),
    ),
    PlanCase(
        "a-revision-at-zero-replicas-keeps-its-share-and-starts-one-for-a-waiting-request",
        Service(minReplicas=0, maxReplicas=2).revision(1, READY).stable(1),
        answers(),
        Outcome(desired={1: 1}, traffic={"chat-00001": 100}, launch=((1, 0),)),
        waiting={1: 1},
    ),
    PlanCase(
        "replicas-follow-min-replicas",
        Service(minReplicas=3, maxReplicas=3)
        .revision(1, READY)
        .stable(1)
        .replica("a", 1, 1, ever_ready=True),
        answers({"a": True}),
        Outcome(
            desired={1: 3},
            traffic={"chat-00001": 100},
            endpoints={"a:9000": True},
            launch=((1, 0), (1, 2)),
        ),
    ),
    # -- deletion --------------------------------------------------------------------------------
    PlanCase(
        "a-deleted-service-cancels-its-replicas-and-has-no-route",
        Service().revision(1, READY).stable(1).replica("a", 1, 0, ever_ready=True).deleted(),
        answers({"a": True}),
        Outcome(desired={1: 0}, cancel=("a",)),
    ),
    PlanCase(
        "a-deleted-service-goes-once-none-of-its-replicas-runs",
        Service().revision(1, READY).stable(1).replica("a", 1, 0, CANCELLED).deleted(),
        answers(),
        Outcome(desired={1: 0}, remove=True),
    ),
]


@pytest.mark.parametrize("case", PLAN_CASES, ids=lambda c: c.id)
def test_plan_service(case: PlanCase) -> None:
    traffic = Traffic(
        NOW, {number: RevisionTraffic(waiting=n) for number, n in case.waiting.items()}
    )
    assert outcome(plan_service(case.service.view(), case.probes, traffic, NOW)) == case.expected


def test_the_plan_stores_only_the_replica_flags_that_change() -> None:
    view = (
        Service(minReplicas=2, maxReplicas=2)
        .revision(1, READY)
        .stable(1)
        .replica("a", 1, 0, ever_ready=True)
        .replica("b", 1, 1)
        .replica("c", 1, 2, CRASHED)
        .view()
    )
    plan = plan_service(view, answers({"a": True, "b": True}), Traffic(NOW), NOW)
    assert {(u.job_id, u.ready, u.ever_ready, u.ended) for u in plan.replicas} == {
        ("b", True, True, False),
        ("c", False, False, True),
    }
    assert [(u.id, u.crashes, u.desired_replicas) for u in plan.revisions] == [(10, 1, 2)]


def test_a_failure_says_what_the_replica_said() -> None:
    view = ready_pair().replica("b", 2, 0, CRASHED, message="exited with code 1").view()
    plan = plan_service(view, answers({"a": True}), Traffic(NOW), NOW)
    assert plan.failed == ()  # a first unexplained crash: replaced
    third = (
        Service()
        .revision(1, READY)
        .revision(2, crashes=2)
        .stable(1)
        .canary(2, 50)
        .replica("b", 2, 0, CRASHED, message="exited with code 1")
        .view()
    )
    (failure,) = plan_service(third, answers(), Traffic(NOW), NOW).failed
    assert failure.message == (
        "3 replicas exited before becoming ready; the last: exited with code 1"
    )


def test_the_autoscaler_state_of_a_revision_that_keeps_no_replicas_is_forgotten() -> None:
    view = ready_pair().replica("b", 2, 0, CRASHED).view()
    plan = plan_service(view, answers({"a": True}, b="broken"), Traffic(NOW), NOW)
    assert plan.forget == (2,)
    assert [s.revision for s in plan.scaling if s.decision is not None] == [1]
    assert [(r.name, r.port) for r in plan.routed] == [("chat-00001", 9000)]
