"""Queue accounting per flavor: used, borrowed and lent across a cohort, pending, and standings.

The state is built in a real store through the services (nodes, the policy) and store rows for
the jobs that hold GPUs; the accounting is then read back as the API reads it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from sqlalchemy.orm import Session

from kiban.executors.base import NodeInfo
from kiban.services import queue_status
from kiban.services.auth import Principal
from kiban.services.jobs import Demand
from kiban.services.nodes import sync_nodes
from kiban.services.policy import apply_policy, current_policy
from kiban.services.queue_status import QueueStatus, queue_statuses, tenant_shares
from kiban.store.db import make_engine, migrate, session_factory
from kiban.store.models import Job, Replica
from kiban.store.models_accounting import TenantUsage
from kiban.testing import manifest

ADMIN = Principal(name="admin", tenant=None, is_admin=True)
HOUR = 3600.0

NODES = [
    NodeInfo(
        name=f"{product.lower()}-{i}",
        gpus=8,
        cpu_millis=64000,
        memory=512 * 2**30,
        labels={"gpu.product": product},
    )
    for product, count in (("H100", 4), ("A100", 2))
    for i in range(count)
]

POLICY: dict[str, Any] = {
    "flavors": [
        {"name": "h100", "nodeLabels": {"gpu.product": "H100"}},
        {"name": "a100", "nodeLabels": {"gpu.product": "A100"}},
    ],
    "cohorts": [{"name": "research"}],
    "queues": [
        {
            "name": "vision",
            "tenant": "vision",
            "cohort": "research",
            "quota": {"h100": {"gpu": 8}, "a100": {"gpu": 8}},
            "lendingLimit": {"a100": {"gpu": 4}},
            "fairShareWeight": 2,
        },
        {
            "name": "speech",
            "tenant": "speech",
            "cohort": "research",
            "quota": {"h100": {"gpu": 8}},
            "borrowingLimit": {"h100": {"gpu": 6}},
        },
        {
            "name": "nlp",
            "tenant": "nlp",
            "cohort": "research",
            "quota": {"h100": {"gpu": 8}, "a100": {"gpu": 0}},
            "lendingLimit": {"h100": {"gpu": 2}},
        },
        {"name": "solo", "tenant": "solo", "quota": {"h100": {"gpu": 4}}},
    ],
    "fairShare": {"halfLife": "1h"},
}


@dataclass
class Store:
    """A migrated store with the nodes and the policy above, and a way to make GPUs busy."""

    session: Session
    free: dict[str, list[int]] = field(
        default_factory=lambda: {n.name: list(range(n.gpus)) for n in NODES}
    )
    jobs: int = 0

    def hold(self, queue: str, flavor: str, gpus: int, state: str = "Running") -> None:
        """A job of ``queue`` holding ``gpus`` GPUs of ``flavor`` (one replica per node)."""
        self.jobs += 1
        job = self._job(queue, state, gpus)
        self.session.add(job)
        rank = 0
        for node in (n for n in NODES if n.labels["gpu.product"].lower() == flavor):
            take, self.free[node.name] = self.free[node.name][:gpus], self.free[node.name][gpus:]
            if take:
                self.session.add(
                    Replica(
                        job_id=job.id,
                        attempt=1,
                        task="worker",
                        index=rank,
                        rank=rank,
                        node=node.name,
                        gpu_ids=take,
                        cpu_millis=1000,
                        memory=2**30,
                        active=True,
                        state="Running",
                    )
                )
                rank += 1
                gpus -= len(take)
        assert gpus == 0, "not enough free GPUs of that flavor in the test cluster"
        self.session.commit()

    def wait(
        self, queue: str, gpus: int, flavor: str | None = None, *, before_0011: bool = False
    ) -> None:
        """A pending job of ``queue``; its recorded reason names ``flavor`` when given. Its
        GPUs are in its spec only when it was stored ``before_0011`` (that added the column)."""
        self.jobs += 1
        job = self._job(queue, "Pending", gpus)
        if before_0011:
            job.gpus = None
        if flavor is not None:
            job.reason_code = "QueueQuotaExhausted"
            job.reason_message = "needs more"
            job.reason_details = {"flavor": flavor, "needed_gpus": gpus}
        self.session.add(job)
        self.session.commit()

    def _job(self, queue: str, state: str, gpus: int) -> Job:
        tenant = next(q["tenant"] for q in POLICY["queues"] if q["name"] == queue)
        spec = manifest("j", queue=queue, gpu=gpus, command=["t"])
        return Job(
            id=f"j-{self.jobs:06d}",
            name="j",
            tenant=tenant,
            queue=queue,
            state=state,
            spec=spec,
            submitted_at=0.0,
            gpus=gpus,
        )

    def statuses(self, principal: Principal = ADMIN, now: float = 0.0) -> dict[str, QueueStatus]:
        policy = current_policy(self.session)
        return {s.queue.name: s for s in queue_statuses(self.session, principal, policy, now)}


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    engine = make_engine(db_url)
    migrate(engine)
    with session_factory(engine)() as session:
        sync_nodes(session, NODES, 0.0)
        apply_policy(session, POLICY, actor="test", at=0.0)
        session.commit()
        yield Store(session)
    engine.dispose()


Holdings = dict[tuple[str, str], int]  # (queue, flavor) -> GPUs held
# (queue, flavor) -> used, borrowed, lent, over quota
Expected = dict[tuple[str, str], tuple[int, int, int, int]]

CASES: list[tuple[str, Holdings, Expected]] = [
    ("idle cluster", {}, {}),
    ("within nominal", {("vision", "h100"): 6}, {("vision", "h100"): (6, 0, 0, 0)}),
    (
        # speech borrows 4; nlp uses all its own, so vision's idle h100 is what is lent
        "one lender",
        {("speech", "h100"): 12, ("nlp", "h100"): 8},
        {
            ("speech", "h100"): (12, 4, 0, 0),
            ("nlp", "h100"): (8, 0, 0, 0),
            ("vision", "h100"): (0, 0, 4, 0),
        },
    ),
    (
        # idle shared quota: vision 8, nlp 2 (its lending limit): 4 borrowed split 3.2 / 0.8
        "two lenders in proportion",
        {("speech", "h100"): 12},
        {
            ("speech", "h100"): (12, 4, 0, 0),
            ("vision", "h100"): (0, 0, 3, 0),
            ("nlp", "h100"): (0, 0, 1, 0),
        },
    ),
    (
        # nlp shares only 2 of its 8 h100 (its own 6 are in use); 2 borrowed are split
        # vision 8 : nlp 2, i.e. 1.6 and 0.4, rounded to 2 and 0
        "lending limit and rounding",
        {("speech", "h100"): 10, ("nlp", "h100"): 6},
        {
            ("speech", "h100"): (10, 2, 0, 0),
            ("nlp", "h100"): (6, 0, 0, 0),
            ("vision", "h100"): (0, 0, 2, 0),
        },
    ),
    (
        # vision lends at most 4 of its 8 a100; nlp (nominal 0) borrows 3 of them
        "borrowing a flavor with no nominal quota",
        {("nlp", "a100"): 3},
        {("nlp", "a100"): (3, 3, 0, 0), ("vision", "a100"): (0, 0, 3, 0)},
    ),
    (
        # vision uses 6 a100: its own 4 and 2 of its shared 4; 2 idle are left, nlp uses them
        "lender using part of what it shares",
        {("vision", "a100"): 6, ("nlp", "a100"): 2},
        {("vision", "a100"): (6, 0, 2, 0), ("nlp", "a100"): (2, 2, 0, 0)},
    ),
    (
        # outside any cohort, use beyond nominal (only after a quota was lowered) is lent by
        # no one: over quota, not borrowed
        "no cohort: beyond nominal is over quota",
        {("solo", "h100"): 6},
        {("solo", "h100"): (6, 0, 0, 2), ("vision", "h100"): (0, 0, 0, 0)},
    ),
    (
        # speech uses 12 beyond its 8: its borrowingLimit (6) allows 6, vision and nlp lend them
        "beyond the borrowing limit is over quota",
        {("speech", "h100"): 20},
        {
            ("speech", "h100"): (20, 6, 0, 6),
            ("vision", "h100"): (0, 0, 5, 0),
            ("nlp", "h100"): (0, 0, 1, 0),
        },
    ),
    (
        # speech asks 6 (its limit; 2 more are beyond it), nlp 6: 12 asked, vision's idle 8
        # covers 8; the 4 left are over quota, split 6 : 6
        "more borrowed than the cohort has idle",
        {("speech", "h100"): 16, ("nlp", "h100"): 14},
        {
            ("speech", "h100"): (16, 4, 0, 4),
            ("nlp", "h100"): (14, 4, 0, 2),
            ("vision", "h100"): (0, 0, 8, 0),
        },
    ),
]


@pytest.mark.parametrize(
    ("holdings", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_used_borrowed_lent_and_over_quota_per_flavor(
    store: Store, holdings: Holdings, expected: Expected
) -> None:
    for (queue, flavor), gpus in holdings.items():
        store.hold(queue, flavor, gpus)
    statuses = store.statuses()
    assert list(statuses) == ["nlp", "solo", "speech", "vision"]
    seen: Expected = {
        (name, f.flavor): (f.used, f.borrowed, f.lent, f.over_quota)
        for name, s in statuses.items()
        for f in s.flavors
    }
    for key, numbers in seen.items():
        assert numbers == expected.get(key, (0, 0, 0, 0)), key
    # Within the cohort what is borrowed is exactly what is lent, flavor by flavor: nothing is
    # borrowed from no one; outside it nothing is borrowed.
    for flavor in ("h100", "a100"):
        cohort = [statuses[q] for q in ("vision", "speech", "nlp")]
        flavors = [f for s in cohort for f in s.flavors if f.flavor == flavor]
        assert sum(f.borrowed for f in flavors) == sum(f.lent for f in flavors)
    assert statuses["solo"].borrowed == statuses["solo"].lent == 0
    for s in statuses.values():
        assert (s.borrowed, s.lent, s.over_quota) == (
            sum(f.borrowed for f in s.flavors),
            sum(f.lent for f in s.flavors),
            sum(f.over_quota for f in s.flavors),
        )
        assert s.gpus_in_use == sum(f.used for f in s.flavors)
        for f in s.flavors:  # what is beyond nominal is borrowed or over quota, nothing else
            assert f.borrowed + f.over_quota == max(f.used - (f.nominal or 0), 0) or (
                f.nominal is None
            )


def test_stopping_jobs_hold_their_gpus_and_pending_ones_do_not(store: Store) -> None:
    store.hold("speech", "h100", 9, state="Stopping")
    store.wait("speech", 8, flavor="h100")
    speech = store.statuses()["speech"].flavors[0]
    assert (speech.used, speech.borrowed, speech.pending_jobs, speech.pending_gpus) == (9, 1, 1, 8)


def test_flavors_are_listed_in_quota_order_with_their_limits(store: Store) -> None:
    vision = store.statuses()["vision"]
    assert [(f.flavor, f.nominal, f.borrowing_limit, f.lending_limit) for f in vision.flavors] == [
        ("h100", 8, None, None),
        ("a100", 8, None, 4),
    ]
    # A flavor in use beyond the quota's flavors (e.g. after a quota change) is listed after.
    store.hold("speech", "a100", 2)
    speech = store.statuses()["speech"]
    assert [(f.flavor, f.nominal, f.used, f.borrowed) for f in speech.flavors] == [
        ("h100", 8, 0, 0),
        ("a100", 0, 2, 2),
    ]


def test_pending_jobs_and_gpus_per_queue_and_per_flavor_named_by_their_reason(
    store: Store,
) -> None:
    store.wait("vision", 4, flavor="h100")
    store.wait("vision", 2, flavor="a100")
    store.wait("vision", 16)  # no pass has judged it yet: no flavor
    store.wait("vision", 1, flavor="a100", before_0011=True)
    store.wait("vision", 32, before_0011=True)
    store.hold("vision", "h100", 2)
    vision = store.statuses()["vision"]
    assert (vision.pending_jobs, vision.pending_gpus, vision.running_jobs) == (5, 55, 1)
    assert [(f.flavor, f.pending_jobs, f.pending_gpus) for f in vision.flavors] == [
        ("h100", 1, 4),
        ("a100", 2, 3),
    ]


def test_a_member_sees_only_its_queues_but_lending_counts_the_whole_cohort(store: Store) -> None:
    store.hold("speech", "h100", 12)  # another tenant borrows vision's idle quota
    member = Principal(name="alice", tenant="vision", is_admin=False)
    statuses = store.statuses(member)
    assert list(statuses) == ["vision"]
    assert [(f.flavor, f.lent) for f in statuses["vision"].flavors] == [("h100", 3), ("a100", 0)]


def test_usage_decays_and_standing_divides_it_by_the_weight(store: Store) -> None:
    store.session.add_all(
        [
            TenantUsage(tenant="vision", usage=8 * HOUR, updated_at=0.0),  # 8 GPU-hours
            TenantUsage(tenant="speech", usage=2 * HOUR, updated_at=0.0),
        ]
    )
    store.session.commit()
    statuses = store.statuses(now=HOUR)  # one half-life later
    assert statuses["vision"].usage == pytest.approx(4 * HOUR)
    assert statuses["vision"].standing == pytest.approx(2 * HOUR)  # fairShareWeight 2
    assert statuses["speech"].standing == pytest.approx(HOUR)
    assert (statuses["nlp"].usage, statuses["nlp"].standing) == (0.0, 0.0)  # nothing used yet
    shares = tenant_shares(store.session, current_policy(store.session), HOUR)
    assert shares["vision"].standing == statuses["vision"].standing


def test_a_long_backlog_is_counted_not_read(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pending jobs are counted and their GPUs added up in the store: no spec of the backlog is
    read (it was, for every one of 50,000 jobs on each GET /queues: 2 s of CPU; issue 21)."""
    backlog = [store._job("speech", "Pending", 1) for _ in range(2_000)]
    for i, job in enumerate(backlog):
        job.id = f"backlog-{i:05d}"
    store.session.add_all(backlog)
    store.session.commit()
    store.wait("speech", 8, flavor="h100")  # judged by a pass: its reason names a flavor
    specs_read: list[object] = []
    demand = queue_status.manifest_demand

    def counting(spec: dict[str, Any]) -> Demand:
        specs_read.append(spec)
        return demand(spec)

    monkeypatch.setattr(queue_status, "manifest_demand", counting)
    speech = store.statuses()["speech"]
    assert (speech.pending_jobs, speech.pending_gpus) == (2_001, 2_008)
    assert [(f.flavor, f.pending_jobs, f.pending_gpus) for f in speech.flavors] == [("h100", 1, 8)]
    assert specs_read == []
