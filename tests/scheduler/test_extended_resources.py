"""Extended resources (``nvidia.com/hostdev``, ``hugepages-2Mi``, MIG slices) in the core:
replicas go only where enough are free, running replicas hold theirs, a queue's quota of them
is charged and checked, and a job that waits says which resource it lacks, with the numbers (or
that no node advertises it, and the close name that one does)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from kiban.scheduler import Decisions, ReasonCode, Snapshot, schedule
from kiban.scheduler.capacity_index import CapacityCache
from kiban.scheduler.forward import forecast
from kiban.scheduler.policy import Policy
from kiban.testing import cluster, job, queue, running, snapshot

HOSTDEV = "nvidia.com/hostdev"
NIC0 = "nvidia-dgx-h100/nic0"
HUGE = "hugepages-2Mi"
GIB = 2**30


def placed(decisions: Decisions, job_id: str) -> list[str]:
    (admit,) = [a for a in decisions.admitted if a.job_id == job_id]
    return [p.node for p in admit.placements]


def waiting(decisions: Decisions, job_id: str) -> tuple[ReasonCode, str, dict[str, object]]:
    (wait,) = [w for w in decisions.waiting if w.job_id == job_id]
    return wait.reason.code, wait.reason.message, wait.reason.details


@dataclass
class Case:
    id: str
    snap: Snapshot
    placed: dict[str, list[str]] = field(default_factory=dict)  # job -> nodes in rank order
    waiting: dict[str, ReasonCode] = field(default_factory=dict)
    says: tuple[str, ...] = ()  # in the first waiting job's message


RDMA = cluster().node("plain", gpus=8).node("rdma", gpus=8, extended={HOSTDEV: 8})

CASES = [
    Case(
        "goes-to-the-node-that-advertises-it-though-best-fit-would-pick-another",
        snapshot(nodes=RDMA, pending=[job("nccl").replicas(1, gpu=8, extended={HOSTDEV: 8})]),
        placed={"nccl": ["rdma"]},
    ),
    Case(
        "a-job-that-asks-for-none-packs-as-before",
        snapshot(
            nodes=cluster().node("a-rdma", gpus=8, extended={HOSTDEV: 8}).node("b", gpus=8),
            pending=[job("plain").replicas(2, gpu=4)],
        ),
        placed={"plain": ["a-rdma", "a-rdma"]},
    ),
    Case(
        "replicas-spread-when-one-node-has-too-few",
        snapshot(
            nodes=cluster().nodes(2, gpus=8, extended={HOSTDEV: 4}),
            pending=[job("ddp").replicas(2, gpu=1, extended={HOSTDEV: 4})],
        ),
        placed={"ddp": ["node-0", "node-1"]},
    ),
    Case(
        "one-admission-takes-them-for-the-next-job-of-the-cycle",
        snapshot(
            nodes=cluster().node("rdma", gpus=8, extended={HOSTDEV: 8}),
            pending=[
                job("first").replicas(1, gpu=1, extended={HOSTDEV: 8}).submitted(1),
                job("second").replicas(1, gpu=1, extended={HOSTDEV: 1}).submitted(2),
            ],
            queues=[queue("default").best_effort()],
        ),
        placed={"first": ["rdma"]},
        waiting={"second": ReasonCode.INSUFFICIENT_CAPACITY},
        says=("0 nvidia.com/hostdev free of the 1 nvidia.com/hostdev needed",),
    ),
    Case(
        "a-running-replica-holds-its-share",
        snapshot(
            nodes=cluster().nodes(2, gpus=8, extended={HOSTDEV: 8}),
            running=[running("old").on("node-0", gpus=1, extended={HOSTDEV: 6})],
            pending=[job("new").replicas(1, gpu=1, extended={HOSTDEV: 4})],
        ),
        placed={"new": ["node-1"]},
    ),
    Case(
        "every-nic-of-a-dgx-and-hugepages-in-bytes",
        snapshot(
            nodes=cluster()
            .node("dgx", gpus=8, extended={NIC0: 1, HUGE: 4 * GIB})
            .node("small", gpus=8, extended={NIC0: 1, HUGE: GIB}),
            pending=[job("mpi").replicas(1, gpu=8, extended={NIC0: 1, HUGE: 2 * GIB})],
        ),
        placed={"mpi": ["dgx"]},
    ),
    Case(
        "no-node-advertises-it-names-it-and-the-close-name",
        snapshot(
            nodes=RDMA,
            pending=[job("typo").replicas(1, gpu=1, extended={"nvidia.com/hostdevs": 1})],
        ),
        waiting={"typo": ReasonCode.UNSCHEDULABLE},
        says=("no node advertises nvidia.com/hostdevs (did you mean nvidia.com/hostdev?)",),
    ),
    Case(
        "no-node-advertises-it-and-nothing-is-close",
        snapshot(
            nodes=RDMA,
            pending=[job("mig").replicas(1, gpu=0, extended={"nvidia.com/mig-1g.10gb": 1})],
        ),
        waiting={"mig": ReasonCode.UNSCHEDULABLE},
        says=("no node advertises nvidia.com/mig-1g.10gb", "task worker needs 1"),
    ),
    Case(
        "more-per-replica-than-any-node-has-says-the-most-one-has",
        snapshot(nodes=RDMA, pending=[job("big").replicas(1, gpu=1, extended={HOSTDEV: 16})]),
        waiting={"big": ReasonCode.UNSCHEDULABLE},
        says=("the most any node has is 8 nvidia.com/hostdev", "16 nvidia.com/hostdev"),
    ),
    Case(
        "more-replicas-than-the-nodes-hold-together",
        snapshot(
            nodes=cluster().nodes(2, gpus=8, extended={HOSTDEV: 4}),
            pending=[job("wide").replicas(3, gpu=1, extended={HOSTDEV: 4})],
        ),
        waiting={"wide": ReasonCode.UNSCHEDULABLE},
        says=("could hold 2 even when idle",),
    ),
    Case(
        "cordoned-advertisers-leave-no-schedulable-node",
        snapshot(
            nodes=cluster()
            .node("plain", gpus=8)
            .node("rdma", gpus=8, extended={HOSTDEV: 8})
            .cordoned("rdma"),
            pending=[job("nccl").replicas(1, gpu=1, extended={HOSTDEV: 8})],
        ),
        waiting={"nccl": ReasonCode.NO_NODE_FITS},
        says=("8 nvidia.com/hostdev", "1 node(s) that could are cordoned"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_placement_and_reasons(case: Case) -> None:
    decisions = schedule(case.snap)
    for job_id, nodes in case.placed.items():
        assert placed(decisions, job_id) == nodes
    for job_id, code in case.waiting.items():
        assert waiting(decisions, job_id)[0] is code
    if case.says:
        first = next(iter(case.waiting))
        message = waiting(decisions, first)[1]
        for phrase in case.says:
            assert phrase in message


def test_placements_carry_the_amounts_they_took() -> None:
    snap = snapshot(nodes=RDMA, pending=[job("nccl").replicas(1, gpu=8, extended={HOSTDEV: 8})])
    (admit,) = schedule(snap).admitted
    assert admit.placements[0].extended == ((HOSTDEV, 8),)


def test_typo_reason_details_name_the_resource_and_the_close_one() -> None:
    snap = snapshot(
        nodes=RDMA, pending=[job("t").replicas(1, gpu=1, extended={"nvidia.com/hostdev2": 1})]
    )
    _code, _message, details = waiting(schedule(snap), "t")
    assert details["limit"] == "unadvertised"
    assert details["resource"] == "nvidia.com/hostdev2"
    assert details["did_you_mean"] == HOSTDEV


def test_insufficient_capacity_details_have_the_numbers() -> None:
    snap = snapshot(
        nodes=cluster().nodes(2, gpus=8, extended={HOSTDEV: 8}),
        running=[running("old").on("node-0", gpus=1, extended={HOSTDEV: 8})],
        pending=[job("pair").replicas(2, gpu=1, extended={HOSTDEV: 8})],
    )
    code, _message, details = waiting(schedule(snap), "pair")
    assert code is ReasonCode.INSUFFICIENT_CAPACITY
    assert details["needed_extended"] == {HOSTDEV: 16}
    assert details["free_extended"] == {HOSTDEV: 8}


# -- quotas ---------------------------------------------------------------------------------------


def quota_snap(*pending: object, used: int = 0) -> Snapshot:
    runs = (
        [running("old").queue("team").on("node-0", gpus=1, extended={HOSTDEV: used})]
        if used
        else []
    )
    return snapshot(
        nodes=cluster().nodes(4, gpus=8, extended={HOSTDEV: 8}),
        queues=[queue("team").quota(64).limits(HOSTDEV, 8).best_effort(), queue("free")],
        running=runs,
        pending=pending,  # type: ignore[arg-type]
    )


def test_quota_admits_within_the_nominal_amount() -> None:
    decisions = schedule(
        quota_snap(job("a").queue("team").replicas(2, gpu=1, extended={HOSTDEV: 4}))
    )
    assert len(placed(decisions, "a")) == 2


def test_quota_in_use_makes_the_next_wait_with_the_numbers() -> None:
    decisions = schedule(
        quota_snap(job("b").queue("team").replicas(1, gpu=1, extended={HOSTDEV: 4}), used=6)
    )
    code, message, details = waiting(decisions, "b")
    assert code is ReasonCode.QUEUE_QUOTA_EXHAUSTED
    assert "needs 4 nvidia.com/hostdev; queue team has 2 free of 8" in message
    assert details["resource"] == HOSTDEV and details["in_use"] == 6


def test_quota_is_charged_within_one_cycle() -> None:
    decisions = schedule(
        quota_snap(
            job("a").queue("team").replicas(1, gpu=1, extended={HOSTDEV: 6}).submitted(1),
            job("b").queue("team").replicas(1, gpu=1, extended={HOSTDEV: 4}).submitted(2),
        )
    )
    assert placed(decisions, "a") == ["node-0"]
    assert waiting(decisions, "b")[0] is ReasonCode.QUEUE_QUOTA_EXHAUSTED


def test_more_than_the_quota_could_ever_hold_is_unschedulable() -> None:
    decisions = schedule(
        quota_snap(job("c").queue("team").replicas(3, gpu=1, extended={HOSTDEV: 4}))
    )
    code, message, _details = waiting(decisions, "c")
    assert code is ReasonCode.UNSCHEDULABLE
    assert "needs 12 nvidia.com/hostdev" in message and "never hold more than 8" in message


def test_a_resource_the_quota_does_not_name_is_not_limited() -> None:
    snap = snapshot(
        nodes=cluster().nodes(2, gpus=8, extended={HOSTDEV: 8, HUGE: 8 * GIB}),
        queues=[queue("team").quota(64).limits(HOSTDEV, 1)],
        pending=[job("h").queue("team").replicas(2, gpu=1, extended={HUGE: 8 * GIB})],
    )
    assert placed(schedule(snap), "h") == ["node-0", "node-1"]


def test_another_queue_is_not_charged() -> None:
    decisions = schedule(
        quota_snap(job("d").queue("free").replicas(1, gpu=1, extended={HOSTDEV: 8}), used=8)
    )
    assert placed(decisions, "d") == ["node-1"]


# -- preemption, forecasts, the cache -------------------------------------------------------------


def test_preemption_frees_the_victims_extended_resources() -> None:
    snap = snapshot(
        nodes=cluster().node("rdma", gpus=8, extended={HOSTDEV: 8}),
        running=[running("low").priority(0).on("rdma", gpus=1, extended={HOSTDEV: 8})],
        pending=[job("high").priority(10).preempts().replicas(1, gpu=1, extended={HOSTDEV: 8})],
    )
    decisions = schedule(snap)
    assert [p.victim_id for p in decisions.preempted] == ["low"]


def test_no_victim_is_taken_for_a_resource_it_does_not_hold() -> None:
    snap = snapshot(
        nodes=cluster().node("rdma", gpus=1, extended={HOSTDEV: 8}),
        running=[running("low").priority(0).on("rdma", gpus=1)],
        pending=[job("high").priority(10).preempts().replicas(1, gpu=0, extended={HOSTDEV: 16})],
    )
    decisions = schedule(snap)
    assert decisions.preempted == ()


def test_forecast_waits_for_the_holder_to_end() -> None:
    snap = snapshot(
        nodes=cluster().nodes(2, gpus=8, extended={HOSTDEV: 8}),
        running=[
            running("a").on("node-0", gpus=1, extended={HOSTDEV: 8}).max_runtime(100),
            running("b").on("node-1", gpus=1, extended={HOSTDEV: 8}).max_runtime(300),
        ],
        pending=[job("next").replicas(1, gpu=1, extended={HOSTDEV: 8})],
    )
    assert forecast(snap, Policy())["next"] == pytest.approx(100, rel=0.05)


def test_cached_index_follows_what_is_free() -> None:
    cache = CapacityCache()
    nodes = cluster().nodes(1, gpus=8, extended={HOSTDEV: 8})
    busy = snapshot(
        nodes=nodes,
        running=[running("old").on("node-0", gpus=1, extended={HOSTDEV: 8})],
        pending=[job("j").replicas(1, gpu=1, extended={HOSTDEV: 8})],
    )
    assert waiting(schedule(busy, cache=cache), "j")[0] is ReasonCode.INSUFFICIENT_CAPACITY
    idle = snapshot(nodes=nodes, pending=[job("j").replicas(1, gpu=1, extended={HOSTDEV: 8})])
    assert placed(schedule(idle, cache=cache), "j") == ["node-0"]


def test_a_job_that_fails_for_want_of_a_resource_does_not_hold_up_one_that_needs_none() -> None:
    """The cycle's memo of failed shapes keeps jobs apart by the extended resources they ask
    for: the same GPUs without the NICs may well fit."""
    snap = snapshot(
        nodes=cluster().node("rdma", gpus=8, extended={HOSTDEV: 8}).node("plain", gpus=8),
        running=[running("old").on("rdma", gpus=1, extended={HOSTDEV: 8})],
        pending=[
            job("nics").replicas(1, gpu=1, extended={HOSTDEV: 8}).submitted(1),
            job("plain").replicas(1, gpu=1).submitted(2),
        ],
        queues=[queue("default").best_effort()],
    )
    decisions = schedule(snap)
    assert waiting(decisions, "nics")[0] is ReasonCode.INSUFFICIENT_CAPACITY
    assert placed(decisions, "plain") == ["rdma"]
