"""Scavenger queues: their jobs run on idle capacity only, are the first victims of any waiting
job whose placement needs their nodes, and never preempt or reserve themselves."""

from __future__ import annotations

from kiban.scheduler import Decisions, ReasonCode, schedule
from kiban.scheduler.preemption import PreemptionGround
from kiban.testing import cluster, job, queue, running, snapshot


def victims(decisions: Decisions) -> list[str]:
    return [p.victim_id for p in decisions.preempted]


def grounds(decisions: Decisions) -> list[str]:
    return [p.reason.details["ground"] for p in decisions.preempted]


SWEEP = queue("sweep").tenant("system").scavenger()


def test_any_job_that_needs_a_scavengers_nodes_preempts_it() -> None:
    # Another tenant's queue in another cohort, a lower priority than the scavenger's, and a
    # class that does not preempt: none of the other grounds would apply.
    for pending in (
        job("work").queue("team").tenant("team").priority(1).replicas(1, gpu=8),
        job("work").queue("team").tenant("team").priority(10**6).replicas(1, gpu=8),
    ):
        decisions = schedule(
            snapshot(
                nodes=cluster().nodes(1, gpus=8),
                queues=[SWEEP, queue("team").tenant("team").cohort("other")],
                running=[running("sw").queue("sweep").tenant("system").priority(5).on("node-0", 8)],
                pending=[pending],
                now=100,
            )
        )
        assert victims(decisions) == ["sw"]
        assert grounds(decisions) == [PreemptionGround.SCAVENGER.value]
        assert decisions.preempted[0].preemptor_id == "work"
        (wait,) = decisions.waiting
        assert wait.reason.code is ReasonCode.WAITING_FOR_PREEMPTION


def test_a_job_that_fits_elsewhere_leaves_the_scavenger_alone() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(2, gpus=8),
            queues=[SWEEP, queue("team")],
            running=[running("sw").queue("sweep").on("node-0", 8)],
            pending=[job("work").queue("team").replicas(1, gpu=8)],
        )
    )
    assert victims(decisions) == []
    (admitted,) = decisions.admitted
    assert [p.node for p in admitted.placements] == ["node-1"]


def test_a_job_that_may_not_use_the_scavengers_nodes_does_not_preempt_it() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(2, gpus=8),
            queues=[SWEEP, queue("team")],
            running=[
                running("sw").queue("sweep").on("node-0", 8),
                running("busy").queue("team").on("node-1", 8),
            ],
            pending=[job("work").queue("team").excluding("node-0").replicas(1, gpu=8)],
        )
    )
    assert victims(decisions) == []


def test_a_job_short_of_its_own_quota_does_not_preempt_a_scavenger() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(2, gpus=8),
            queues=[SWEEP, queue("team").quota(8)],
            running=[
                running("sw").queue("sweep").on("node-0", 8),
                running("mine").queue("team").on("node-1", 8),
            ],
            pending=[job("work").queue("team").replicas(1, gpu=8)],
        )
    )
    assert victims(decisions) == []
    (wait,) = decisions.waiting
    assert wait.reason.code is ReasonCode.QUEUE_QUOTA_EXHAUSTED


def test_scavengers_are_taken_before_any_other_ground() -> None:
    # The preemptor could take the lower-priority job of its own queue (priority ground), but
    # the scavenger goes first, though its priority is higher.
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(2, gpus=8),
            queues=[SWEEP, queue("team")],
            running=[
                running("low").queue("team").priority(1).on("node-0", 8).started(90),
                running("sw").queue("sweep").priority(5000).on("node-1", 8).started(0),
            ],
            pending=[job("urgent").queue("team").priority(10000).preempts().replicas(1, gpu=8)],
            now=100,
        )
    )
    assert victims(decisions) == ["sw"]
    assert grounds(decisions) == ["scavenger"]


def test_a_scavenger_never_preempts_nor_reserves() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(1, gpus=8),
            queues=[SWEEP, queue("team")],
            running=[
                running("low").queue("team").priority(1).on("node-0", 4).max_runtime(50),
                running("low-sw").queue("sweep").priority(1).on("node-0", 4).max_runtime(50),
            ],
            pending=[
                job("sw").queue("sweep").priority(10**6).preempts().replicas(1, gpu=8),
            ],
            now=10,
        )
    )
    assert victims(decisions) == []
    (wait,) = decisions.waiting
    # No reservation either: it takes what is idle when it is idle, and holds nothing back.
    assert wait.reason.code is ReasonCode.INSUFFICIENT_CAPACITY


def test_a_gang_needing_one_more_node_preempts_the_one_scavenger_it_needs() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(3, gpus=8),
            queues=[SWEEP, queue("team")],
            running=[
                running("sw-a").queue("sweep").on("node-0", 8).started(0),
                running("sw-b").queue("sweep").on("node-1", 8).started(5),
            ],
            pending=[job("gang").queue("team").replicas(2, gpu=8).gang(2)],
            now=100,
        )
    )
    # The gang needs node-2 and one more node: the most recently started scavenger gives way.
    assert victims(decisions) == ["sw-b"]
    assert sorted(decisions.preempted[0].nodes) == ["node-1", "node-2"]


def test_a_scavenger_gang_gives_way_whole() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(2, gpus=8),
            queues=[SWEEP, queue("team")],
            running=[running("sweep-gang").queue("sweep").on("node-0", 8).on("node-1", 8)],
            pending=[job("work").queue("team").replicas(1, gpu=8)],
            now=100,
        )
    )
    assert victims(decisions) == ["sweep-gang"]


def test_other_queues_jobs_go_before_a_scavengers_in_the_order() -> None:
    # The scavenger's tenant stands far lower and its job came first: the other job still goes
    # first, and the scavenger's waits for capacity left idle.
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(1, gpus=8),
            queues=[SWEEP, queue("team").tenant("team")],
            pending=[
                job("sw").queue("sweep").tenant("system").submitted(0).replicas(1, gpu=8),
                job("work").queue("team").tenant("team").submitted(50).replicas(1, gpu=8),
            ],
            standings={"system": 0.0, "team": 10.0**9},
            now=100,
        )
    )
    assert [a.job_id for a in decisions.admitted] == ["work"]
    assert victims(decisions) == []
