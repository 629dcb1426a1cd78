"""Quotas per flavor, borrowing and lending in cohorts, flavors restricted to some queues."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from kiban.scheduler import Decisions, ReasonCode, Snapshot, schedule
from kiban.testing import ClusterBuilder, cluster, job, queue, running, snapshot


def admitted(decisions: Decisions) -> dict[str, str]:
    return {a.job_id: a.flavor for a in decisions.admitted}


def reasons(decisions: Decisions) -> dict[str, ReasonCode]:
    return {w.job_id: w.reason.code for w in decisions.waiting}


def two_flavors() -> ClusterBuilder:
    return (
        cluster()
        .nodes(2, gpus=8, prefix="h", flavor="h100")
        .nodes(2, gpus=8, prefix="a", flavor="a100")
    )


@dataclass
class Case:
    id: str
    snap: Snapshot
    admitted: dict[str, str]
    waiting: dict[str, ReasonCode] = field(default_factory=dict)


CASES = [
    Case(
        "within-nominal",
        snapshot(
            nodes=two_flavors(),
            queues=[queue("vision").nominal("h100", 8)],
            pending=[job("a").queue("vision").replicas(1, gpu=8)],
        ),
        admitted={"a": "h100"},
    ),
    Case(
        "flavors-tried-in-order",
        snapshot(
            nodes=two_flavors(),
            queues=[queue("vision").nominal("h100", 8).nominal("a100", 8)],
            pending=[
                job(f"j{i}").queue("vision").replicas(1, gpu=8).submitted(i) for i in range(2)
            ],
        ),
        admitted={"j0": "h100", "j1": "a100"},
    ),
    Case(
        "no-cohort-no-borrowing",
        snapshot(
            nodes=two_flavors(),
            queues=[queue("vision").nominal("h100", 8), queue("nlp").nominal("h100", 8)],
            pending=[job("big").queue("vision").replicas(2, gpu=8)],
        ),
        admitted={},
        waiting={"big": ReasonCode.UNSCHEDULABLE},
    ),
    Case(
        "borrows-idle-quota-of-the-cohort",
        snapshot(
            nodes=two_flavors(),
            queues=[
                queue("vision").nominal("h100", 8).cohort("research"),
                queue("nlp").nominal("h100", 8).cohort("research"),
            ],
            pending=[job("big").queue("vision").replicas(2, gpu=8)],
        ),
        admitted={"big": "h100"},
    ),
    Case(
        "borrowing-limit",
        snapshot(
            nodes=two_flavors(),
            queues=[
                queue("vision").nominal("h100", 8).cohort("research").borrowing_limit("h100", 4),
                queue("nlp").nominal("h100", 8).cohort("research"),
            ],
            pending=[job("big").queue("vision").replicas(2, gpu=8)],
        ),
        admitted={},
        waiting={"big": ReasonCode.UNSCHEDULABLE},
    ),
    Case(
        "lending-limit",
        snapshot(
            nodes=two_flavors(),
            queues=[
                queue("vision").nominal("h100", 8).cohort("research"),
                queue("nlp").nominal("h100", 8).cohort("research").lending_limit("h100", 4),
            ],
            pending=[
                job("twelve").queue("vision").task("w", 1, gpu=8).task("x", 1, gpu=4),
            ],
        ),
        admitted={"twelve": "h100"},
    ),
    Case(
        "cohort-exhausted-when-the-lender-uses-its-quota",
        snapshot(
            nodes=two_flavors(),
            queues=[
                queue("vision").nominal("h100", 8).cohort("research"),
                queue("nlp").nominal("h100", 8).cohort("research"),
            ],
            running=[running("n1").queue("nlp").on("h-0", gpus=6)],
            pending=[job("big").queue("vision").replicas(2, gpu=8)],
        ),
        admitted={},
        waiting={"big": ReasonCode.COHORT_EXHAUSTED},
    ),
    Case(
        "flavor-restricted-to-other-queues",
        snapshot(
            nodes=two_flavors(),
            queues=[queue("nlp").nominal("h100", 8)],
            pending=[job("a").queue("nlp").replicas(1, gpu=8)],
            restricted={"h100": ["vision"]},
        ),
        admitted={},
        waiting={"a": ReasonCode.FLAVOR_NOT_ALLOWED},
    ),
    Case(
        "restricted-flavor-skipped-for-the-next",
        snapshot(
            nodes=two_flavors(),
            queues=[queue("nlp").nominal("h100", 8).nominal("a100", 8)],
            pending=[job("a").queue("nlp").replicas(1, gpu=8)],
            restricted={"h100": ["vision"]},
        ),
        admitted={"a": "a100"},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_quota_cases(case: Case) -> None:
    decisions = schedule(case.snap)
    assert admitted(decisions) == case.admitted
    assert reasons(decisions) == case.waiting


def test_cohort_exhausted_message_has_the_numbers() -> None:
    decisions = schedule(
        snapshot(
            nodes=two_flavors(),
            queues=[
                queue("vision").nominal("h100", 8).cohort("research"),
                queue("nlp").nominal("h100", 8).cohort("research"),
            ],
            running=[running("n1").queue("nlp").on("h-0", gpus=4)],
            pending=[job("big").queue("vision").replicas(2, gpu=8)],
        )
    )
    (wait,) = decisions.waiting
    assert wait.reason.message == (
        "needs 16 h100 GPUs; queue vision has 8 free of 8 and cohort research can lend 4"
    )
    assert wait.reason.details["cohort_can_lend_gpus"] == 4


def test_two_borrowers_share_what_the_cohort_lends_once() -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(3, gpus=8),
            queues=[
                queue("a").quota(8).cohort("c").best_effort(),
                queue("b").quota(8).cohort("c").best_effort(),
                queue("idle").quota(8).cohort("c"),
            ],
            pending=[
                job("a1").queue("a").replicas(1, gpu=8).submitted(0),
                job("a2").queue("a").replicas(1, gpu=8).submitted(1),
                job("b1").queue("b").replicas(1, gpu=8).submitted(2),
                job("b2").queue("b").replicas(1, gpu=8).submitted(3),
            ],
        )
    )
    # 24 GPUs of nominal quota in the cohort: three 8-GPU jobs, never four.
    assert len(decisions.admitted) == 3
    assert [w.reason.code for w in decisions.waiting] == [ReasonCode.COHORT_EXHAUSTED]
