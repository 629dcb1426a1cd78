"""Preemption: on which grounds, which victims first, and never back and forth."""

from __future__ import annotations

from kiban.scheduler import Decisions, ReasonCode, schedule
from kiban.scheduler.policy import Policy
from kiban.scheduler.snapshot import PendingJob, RunningJob
from kiban.testing import cluster, job, queue, running, snapshot


def victims(decisions: Decisions) -> list[str]:
    return [p.victim_id for p in decisions.preempted]


def test_higher_priority_preempts_lower_in_its_queue() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(1, gpus=8),
            running=[running("low").priority(100).on("node-0", gpus=8)],
            pending=[job("urgent").priority(10000).preempts().replicas(1, gpu=8)],
            now=100,
        )
    )
    assert victims(decisions) == ["low"]
    assert decisions.preempted[0].preemptor_id == "urgent"
    (wait,) = decisions.waiting
    assert wait.reason.code is ReasonCode.WAITING_FOR_PREEMPTION
    assert decisions.admitted == ()


def test_no_preemption_without_preemption_policy_or_higher_priority() -> None:
    for pending in (
        job("urgent").priority(10000).replicas(1, gpu=8),  # class does not preempt
        job("peer").priority(100).preempts().replicas(1, gpu=8),  # same priority
    ):
        decisions = schedule(
            snapshot(
                nodes=cluster().nodes(1, gpus=8),
                running=[running("low").priority(100).on("node-0", gpus=8)],
                pending=[pending],
            )
        )
        assert victims(decisions) == []


def test_victims_least_work_lost_first() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(2, gpus=4),
            running=[
                # Same priority, both started at 0; "fresh" checkpointed a moment ago.
                running("stale").priority(1).on("node-0", gpus=4).checkpointed(10),
                running("fresh").priority(1).on("node-1", gpus=4).checkpointed(95),
            ],
            pending=[job("urgent").priority(10).preempts().replicas(1, gpu=4)],
            now=100,
        )
    )
    assert victims(decisions) == ["fresh"]


def test_lower_priority_victims_before_less_work_lost() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(2, gpus=4),
            running=[
                running("mid").priority(5).on("node-0", gpus=4).checkpointed(99),
                running("lowest").priority(1).on("node-1", gpus=4),
            ],
            pending=[job("urgent").priority(10).preempts().replicas(1, gpu=4)],
            now=100,
        )
    )
    assert victims(decisions) == ["lowest"]


def test_min_runtime_protects_a_job_that_just_started() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(1, gpus=8),
            running=[running("new").priority(1).on("node-0", gpus=8).protected_until(200)],
            pending=[job("urgent").priority(10).preempts().replicas(1, gpu=8)],
            now=100,
        )
    )
    assert victims(decisions) == []


def test_never_preempt_when_the_preemptor_would_not_fit_anyway() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(2, gpus=8),
            running=[
                running("low").priority(1).on("node-0", gpus=8),
                running("peer").priority(10).on("node-1", gpus=8),
            ],
            pending=[job("urgent").priority(10).preempts().replicas(2, gpu=8)],
        )
    )
    assert victims(decisions) == []
    assert decisions.waiting[0].reason.code is ReasonCode.INSUFFICIENT_CAPACITY


def test_the_fewest_victims_are_taken() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(4, gpus=8),
            running=[running(f"r{i}").priority(1).on(f"node-{i}", gpus=8) for i in range(4)],
            pending=[job("urgent").priority(10).preempts().replicas(2, gpu=8)],
        )
    )
    assert len(victims(decisions)) == 2


def test_reclaim_takes_back_what_was_borrowed() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(2, gpus=8),
            queues=[queue("lender").quota(8).cohort("c"), queue("borrower").quota(8).cohort("c")],
            running=[
                running("own").queue("borrower").on("node-0", gpus=8).started(0),
                running("borrowed").queue("borrower").on("node-1", gpus=8).started(5),
            ],
            pending=[job("mine").queue("lender").replicas(1, gpu=8)],
            now=100,
        )
    )
    assert len(victims(decisions)) == 1
    assert decisions.preempted[0].reason.details["ground"] == "reclaim"


def test_a_queue_within_nominal_is_never_reclaimed_from() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(2, gpus=8),
            queues=[queue("a").quota(8).cohort("c"), queue("b").quota(8).cohort("c")],
            running=[
                running("a1").queue("a").on("node-0", gpus=8),
                running("b1").queue("b").on("node-1", gpus=8),
            ],
            pending=[job("a2").queue("a").replicas(1, gpu=8)],
        )
    )
    assert victims(decisions) == []


def test_fair_share_preempts_only_a_borrower_with_a_higher_standing() -> None:
    def decide(standing_of_borrower: float) -> Decisions:
        return schedule(
            snapshot(
                nodes=cluster().nodes(2, gpus=8),
                queues=[
                    queue("light").tenant("light").quota(4).cohort("c"),
                    queue("heavy").tenant("heavy").quota(12).cohort("c"),
                    queue("third").tenant("third").quota(0).cohort("c"),
                ],
                running=[
                    running("h1").queue("heavy").tenant("heavy").on("node-0", gpus=8),
                    running("h2").queue("third").tenant("third").on("node-1", gpus=8),
                ],
                pending=[job("l1").queue("light").tenant("light").replicas(1, gpu=8)],
                standings={"light": 0.0, "third": standing_of_borrower},
            )
        )

    # "third" borrows 8 GPUs; "light" needs to borrow 4 to run its 8-GPU job.
    assert victims(decide(10**9)) == ["h2"]
    assert decide(10**9).preempted[0].reason.details["ground"] == "fair-share"
    # After admission light's standing would be 8 GPUs x 3600 s; a borrower below that stays.
    assert victims(decide(1000.0)) == []


def test_preemptor_waits_for_its_stopping_victims_and_takes_no_more() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(2, gpus=8),
            running=[
                running("going").priority(1).on("node-0", gpus=8).preempted_by("urgent"),
                running("other").priority(1).on("node-1", gpus=8),
            ],
            pending=[job("urgent").priority(10).preempts().replicas(1, gpu=8)],
        )
    )
    assert victims(decisions) == []
    assert decisions.waiting[0].reason.code is ReasonCode.WAITING_FOR_PREEMPTION
    assert "going" in decisions.waiting[0].reason.message


def test_a_returned_victim_does_not_pass_its_loss_on_by_fair_share() -> None:
    """A job preempted for another may reclaim its own quota or preempt by priority, but not
    take a borrower's GPUs by fair share: else one reclaim cascades through the cohort, each
    step stopping a job, round after round."""

    def decide(returned: bool) -> Decisions:
        light = job("l1").queue("light").tenant("light").replicas(1, gpu=8)
        if returned:
            light.preempted_by("someone")
        return schedule(
            snapshot(
                nodes=cluster().nodes(2, gpus=8),
                queues=[
                    queue("light").tenant("light").quota(4).cohort("c"),
                    queue("heavy").tenant("heavy").quota(12).cohort("c"),
                    queue("third").tenant("third").quota(0).cohort("c"),
                ],
                running=[
                    running("h1").queue("heavy").tenant("heavy").on("node-0", gpus=8),
                    running("h2").queue("third").tenant("third").on("node-1", gpus=8),
                ],
                pending=[light],
                standings={"light": 0.0, "third": 10.0**9},
            )
        )

    assert victims(decide(returned=False)) == ["h2"]
    assert victims(decide(returned=True)) == []


def test_a_job_victims_were_stopped_for_goes_before_the_fair_order() -> None:
    """The GPUs and quota freed by a preemption go to its preemptor, even when another tenant
    with a lower standing waits for the same quota (on other free GPUs)."""
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(2, gpus=8),
            queues=[
                queue("a").tenant("a").quota(8).cohort("c"),
                queue("b").tenant("b").quota(0).cohort("c"),
            ],
            pending=[
                job("thrifty").queue("b").tenant("b").replicas(1, gpu=8),
                job("preemptor").queue("a").tenant("a").replicas(1, gpu=8).nominated("node-0"),
            ],
            standings={"a": 10.0**9, "b": 0.0},
        )
    )
    assert [a.job_id for a in decisions.admitted] == ["preemptor"]
    assert decisions.waiting[0].reason.code is ReasonCode.COHORT_EXHAUSTED


def test_a_policy_ground_preempts_across_queues_one_way() -> None:
    """``Policy.may_preempt`` (here: shortest remaining time first) preempts in any queue,
    only where the predicate holds, and the job it preempted cannot preempt it back."""

    def shorter_remaining(job: PendingJob, victim: RunningJob, now: float) -> bool:
        assert job.max_runtime is not None and victim.expected_end is not None
        return job.max_runtime < victim.expected_end - now

    policy = Policy(may_preempt=shorter_remaining)

    def decide(pending_runtime: float, preempted_by: str | None = None) -> Decisions:
        waiting = job("w").queue("b").replicas(1, gpu=8).max_runtime(pending_runtime)
        if preempted_by is not None:
            waiting.preempted_by(preempted_by)
        return schedule(
            snapshot(
                nodes=cluster().nodes(1, gpus=8),
                running=[running("long").queue("a").on("node-0", gpus=8).max_runtime(1000)],
                pending=[waiting],
                now=100,
            ),
            policy,
        )

    assert victims(decide(pending_runtime=50)) == ["long"]
    assert decide(pending_runtime=50).preempted[0].reason.details["ground"] == "order"
    assert victims(decide(pending_runtime=5000)) == []  # more left than the running job
    assert victims(decide(pending_runtime=50, preempted_by="long")) == []
    plain = snapshot(
        nodes=cluster().nodes(1, gpus=8),
        running=[running("long").queue("a").on("node-0", gpus=8).max_runtime(1000)],
        pending=[job("w").queue("b").replicas(1, gpu=8).max_runtime(50)],
        now=100,
    )
    assert victims(schedule(plain)) == []  # without the policy's ground, none across queues


def test_victims_the_gang_does_not_need_are_spared() -> None:
    """Least-loss order takes the recent 1-GPU job first, but the 8-GPU job can only start on
    the other node: once that node's victim is taken, the first one is given back."""
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(2, gpus=8),
            running=[
                running("small").priority(1).on("node-0", gpus=1).started(90),
                running("keeper").priority(100).on("node-0", gpus=7).started(0),
                running("big").priority(1).on("node-1", gpus=8).started(0),
            ],
            pending=[job("urgent").priority(100).preempts().replicas(1, gpu=8)],
            now=100,
        )
    )
    assert victims(decisions) == ["big"]
    assert decisions.preempted[0].nodes == ("node-1",)
