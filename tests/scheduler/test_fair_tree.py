"""Fair share's second level: within a tenant, members by their own standing (Fair Tree)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from kiban.scheduler import schedule
from kiban.scheduler.decisions import Decisions
from kiban.scheduler.fair_tree import FairTree
from kiban.testing import cluster, job, queue, running, snapshot
from kiban.testing.builders import JobBuilder


def _job(job_id: str, member: str | None, at: float, priority: int = 0) -> JobBuilder:
    return job(job_id).queue("q").tenant("vision").member(member).submitted(at).priority(priority)


@dataclass(frozen=True)
class OrderCase:
    name: str
    jobs: list[JobBuilder]
    admitted: list[str]  # on ``gpus`` one-GPU nodes, in the order the cycle admits them
    gpus: int = 1
    standings: dict[tuple[str, str], float] = field(default_factory=dict)
    weights: dict[tuple[str, str], float] = field(default_factory=dict)


ORDER_CASES = [
    OrderCase(
        "the member who used less goes first, though they submitted later",
        [_job("a1", "alice", 0), _job("b1", "bob", 10)],
        ["b1"],
        standings={("vision", "alice"): 5000.0, ("vision", "bob"): 10.0},
    ),
    OrderCase(
        "with no usage yet, first come, first served",
        [_job("a1", "alice", 0), _job("b1", "bob", 10)],
        ["a1"],
    ),
    OrderCase(
        "priority comes before the member's standing",
        [_job("a1", "alice", 0, priority=10), _job("b1", "bob", 10)],
        ["a1"],
        standings={("vision", "alice"): 5000.0},
    ),
    OrderCase(
        "a member new to usage does not take every place of one cycle",
        [
            *(_job(f"a{i}", "alice", i) for i in range(3)),
            *(_job(f"b{i}", "bob", 10 + i) for i in range(3)),
        ],
        ["a0", "a1", "b0"],
        gpus=3,
        standings={("vision", "bob"): 5000.0},
    ),
    OrderCase(
        "a member's weight divides what each admission charges it",
        [
            *(_job(f"b{i}", "bob", i) for i in range(3)),
            *(_job(f"a{i}", "alice", 10 + i) for i in range(3)),
        ],
        ["b0", "a0", "a1"],
        gpus=3,
        weights={("vision", "alice"): 2.0},
    ),
    OrderCase(
        "the same without the weight: members alternate",
        [
            *(_job(f"b{i}", "bob", i) for i in range(3)),
            *(_job(f"a{i}", "alice", 10 + i) for i in range(3)),
        ],
        ["b0", "a0", "b1"],
        gpus=3,
    ),
    OrderCase(
        "jobs without a member keep the queue's order whatever others' standings",
        [_job("x1", None, 0), _job("x2", None, 10)],
        ["x1"],
        standings={("vision", "alice"): 1.0},
    ),
    OrderCase(
        "a teammate of another tenant's name does not count",
        [_job("a1", "alice", 0), _job("b1", "bob", 10)],
        ["a1"],
        standings={("other", "alice"): 5000.0},
    ),
]


@pytest.mark.parametrize("case", ORDER_CASES, ids=lambda c: c.name)
def test_members_order_within_their_queue(case: OrderCase) -> None:
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(case.gpus, gpus=1),
            queues=[queue("q").tenant("vision").best_effort()],
            pending=case.jobs,
            member_standings=case.standings,
            member_weights=case.weights,
        )
    )
    assert [a.job_id for a in decisions.admitted] == case.admitted


def test_tenants_still_come_before_members() -> None:
    """A light member of a heavy tenant waits behind a heavy member of a light tenant."""
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(1, gpus=1),
            queues=[queue("h").tenant("heavy"), queue("l").tenant("light")],
            pending=[
                job("h1").queue("h").tenant("heavy").member("thrifty").submitted(0),
                job("l1").queue("l").tenant("light").member("spender").submitted(10),
            ],
            standings={"heavy": 10.0**6, "light": 0.0},
            member_standings={("heavy", "thrifty"): 0.0, ("light", "spender"): 10.0**9},
        )
    )
    assert [a.job_id for a in decisions.admitted] == ["l1"]


def test_strict_fifo_head_is_the_member_who_used_least() -> None:
    """In a StrictFIFO queue the head is chosen by member standing; the rest wait behind it."""
    decisions = schedule(
        snapshot(
            nodes=cluster().nodes(1, gpus=2),
            queues=[queue("q").tenant("vision").strict()],
            running=[running("r").queue("q").tenant("vision").on("node-0", gpus=1)],
            pending=[_job("a1", "alice", 0).replicas(1, gpu=2), _job("b1", "bob", 10)],
            member_standings={("vision", "alice"): 10.0**6},
        )
    )
    assert [a.job_id for a in decisions.admitted] == ["b1"]
    assert [w.job_id for w in decisions.waiting] == ["a1"]


def _teammate_borrows(borrower_standing: float, preemptor_member: str = "bob") -> Decisions:
    """Alice borrows 8 GPUs in her tenant's second queue; a teammate needs to borrow 4."""
    return schedule(
        snapshot(
            nodes=cluster().nodes(2, gpus=8),
            queues=[
                queue("mine").tenant("vision").quota(4).cohort("c"),
                queue("lender").tenant("other").quota(12).cohort("c"),
                queue("theirs").tenant("vision").quota(0).cohort("c"),
            ],
            running=[
                running("o1").queue("lender").tenant("other").member("carol").on("node-0", gpus=8),
                running("a1").queue("theirs").tenant("vision").member("alice").on("node-1", gpus=8),
            ],
            pending=[
                job("p1").queue("mine").tenant("vision").member(preemptor_member).replicas(1, gpu=8)
            ],
            standings={"vision": 0.0, "other": 0.0},
            member_standings={("vision", "alice"): borrower_standing},
        )
    )


def test_fair_share_preempts_a_teammate_who_used_more() -> None:
    decisions = _teammate_borrows(10.0**9)
    assert [p.victim_id for p in decisions.preempted] == ["a1"]
    assert decisions.preempted[0].reason.details["ground"] == "fair-share"


def test_fair_share_spares_a_teammate_below_the_preemptors_standing_after_admission() -> None:
    # After admission bob's standing would be 8 GPUs x 3600 s; alice below that stays.
    assert _teammate_borrows(1000.0).preempted == ()


def test_fair_share_never_preempts_the_same_member() -> None:
    assert _teammate_borrows(10.0**9, preemptor_member="alice").preempted == ()


@pytest.mark.parametrize(
    ("members", "expected"),
    [
        ([], []),
        (["alice"], ["0"]),
        (["alice", "alice", "alice"], ["0", "1", "2"]),
        (["alice", "bob", "alice", "bob"], ["1", "0", "3", "2"]),
        ([None, "bob", None], ["0", "1", "2"]),
    ],
)
def test_order_members_keeps_each_members_order(
    members: list[str | None], expected: list[str]
) -> None:
    """Bob (standing 0) before alice (standing 10); each member's jobs keep their order; with a
    charge of one hour per GPU, each admission passes the turn to the other member."""
    tree = FairTree({("vision", "alice"): 10.0}, {}, 3600.0)
    jobs = [(i, _job(str(i), m, float(i)).build()) for i, m in enumerate(members)]
    tree.order_members(jobs)
    assert [j.id for _i, j in jobs] == expected


def test_a_shared_queue_keeps_each_tenants_places_and_each_places_key() -> None:
    """In a queue of two tenants, members reorder only within their tenant's places, and the
    keys stay where they were: the queue's head key (which breaks ties between queues) is the
    same however a tenant's members split its jobs."""
    tree = FairTree({("vision", "alice"): 10.0**6}, {}, 3600.0)
    built = [
        _job("a1", "alice", 0).build(),
        job("s1").queue("q").tenant("speech").member("sam").submitted(1).build(),
        _job("b1", "bob", 2).build(),
        job("s2").queue("q").tenant("speech").member("sue").submitted(3).build(),
    ]
    jobs = [(i, j) for i, j in enumerate(built)]
    tree.order_members(jobs)
    assert [(key, j.id) for key, j in jobs] == [(0, "b1"), (1, "s1"), (2, "a1"), (3, "s2")]
