"""The simulator's own bookkeeping made cheaper must make the same objects and decisions:
``evolve`` (its ``replace`` without ``__init__``), one fair tree per snapshot, waiting jobs
revised only in the queues that hold the learning tenants' jobs, estimates shared by the jobs
of equal features."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from sim_support import write_csv

from kiban.domain.runtime_estimate import JobFeatures, RuntimeEstimate, RuntimeEstimator
from kiban.domain.usage import Decay
from kiban.scheduler.fair_tree import FairTree
from kiban.scheduler.policy import priority_then_fifo
from kiban.scheduler.snapshot import (
    FlavorView,
    NodeView,
    PendingJob,
    QueueView,
    RunningJob,
    RunningReplica,
    Snapshot,
    TaskDemand,
)
from kiban.sim.engine import Simulator
from kiban.sim.policies import policy_named
from kiban.sim.run import SimOptions, prepare
from kiban.sim.state import ClusterState, evolve
from kiban.testing import job

RUNNING = RunningJob(
    id="r",
    queue="q",
    tenant="t",
    priority=1,
    submitted_at=3.0,
    started_at=7.0,
    replicas=(RunningReplica("n0", (0, 1), 100, 10), RunningReplica("n1", (2,), 100, 10)),
    flavor_gpus={"default": 3},
    member="m",
    estimated_runtime=50.0,
)
PENDING = PendingJob("p", "q", 0, 1.0, (TaskDemand("main", 2, 4, 100, 10),), 2, tenant="t")
NODE = NodeView("n0", 8, 64_000, 2**36, tuple(range(8)), 64_000, 2**36)
QUEUE = QueueView("q", "t", nominal={"default": 8}, cohort="c", used={"default": 2})


@pytest.mark.parametrize(
    ("made", "changes"),
    [
        (RUNNING, {"last_progress_at": 1807.0}),
        (PENDING, {"estimated_runtime": 120.0}),
        (PENDING, {"nominated_nodes": ("n0", "n1")}),
        (NODE, {"free_gpu_ids": (1, 2), "free_cpu_millis": 5, "free_memory": 6}),
        (QUEUE, {"used": {"default": 5}}),
    ],
)
def test_evolve_makes_what_replace_makes(made: object, changes: dict[str, object]) -> None:
    """Every field, the derived ones (a running job's GPUs, a pending job's shape, a queue's
    quota terms) included, is what ``dataclasses.replace`` gives; the original is unchanged."""
    ours = evolve(made, **changes)
    theirs = replace(made, **changes)  # type: ignore[type-var]
    assert ours == theirs and ours is not made
    for name in type(made).__slots__:  # type: ignore[attr-defined]
        assert getattr(ours, name) == getattr(theirs, name), name
    assert made != ours


def test_evolve_names_an_unknown_field() -> None:
    with pytest.raises(TypeError, match="no field 'last_progress'"):
        evolve(RUNNING, last_progress=5.0)


def test_one_fair_tree_per_snapshot_and_charge() -> None:
    """The victim search asks for the snapshot's tree once per search: it gets the one made
    for the cycle; another snapshot or another charge gets its own."""
    one = Snapshot(now=0.0, nodes=(), queues=(), pending=(), member_standings={("t", "m"): 2.0})
    other = Snapshot(now=1.0, nodes=(), queues=(), pending=(), member_standings={("t", "m"): 3.0})
    tree = FairTree.of(one, 0.5)
    assert FairTree.of(one, 0.5) is tree
    assert FairTree.of(one, 0.25) is not tree and FairTree.of(one, 0.25).charge_per_gpu_s == 0.25
    assert FairTree.of(other, 0.5).standing("t", "m") == 3.0
    assert FairTree.of(one, 0.5).standing("t", "m") == 2.0


def test_revision_reaches_only_the_learning_tenants_but_all_their_queues() -> None:
    """A tenant's jobs are revised in every queue that holds them (one shared with another
    tenant included); the other tenants' jobs are left as they are, and only those asked."""
    nodes = [NodeView("n0", 8, 64_000, 2**36, tuple(range(8)), 64_000, 2**36)]
    queues = [QueueView("a", "vision"), QueueView("b", "speech"), QueueView("c", "vision")]
    cluster = ClusterState(
        nodes=nodes, queues=queues, order_key=priority_then_fifo, flavors=(FlavorView("default"),)
    )
    for job_id, queue, tenant, at in [
        ("v1", "a", "vision", 1.0),
        ("s1", "b", "speech", 2.0),
        ("v2", "c", "vision", 3.0),
        ("s2", "c", "speech", 4.0),
    ]:
        cluster.add_waiting(job(job_id).queue(queue).tenant(tenant).submitted(at).build())
    asked: list[str] = []

    def revise(pending: PendingJob) -> PendingJob:
        asked.append(pending.id)
        return replace(pending, estimated_runtime=60.0)

    cluster.revise_waiting({"vision"}, revise)
    assert sorted(asked) == ["v1", "v2"]
    estimates = {j.id: j.estimated_runtime for j in cluster.snapshot(5.0, {}).pending}
    assert estimates == {"v1": 60.0, "s1": None, "v2": 60.0, "s2": None}


class CountingEstimator(RuntimeEstimator):
    """Counts the estimates asked, by features."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[JobFeatures] = []

    def estimate(self, features: JobFeatures) -> RuntimeEstimate | None:
        self.asked.append(features)
        return super().estimate(features)


def test_jobs_of_equal_features_share_one_estimate_between_lessons(tmp_path: Path) -> None:
    """Between two runs learned, the estimator is asked once per distinct features, however
    many waiting jobs have them: one GPU, one tenant, a queue of same-sized jobs."""
    rows = [f"0,{100 + k},1,vision" for k in range(8)]
    trace = write_csv(tmp_path / "t.csv", rows, "submit_time,duration,gpus,tenant")
    prepared = prepare(SimOptions(trace, nodes=1, gpus_per_node=1, rho=False))
    sim = Simulator(prepared.jobs, prepared.cluster, prepared.queues, policy_named("recommended"))
    counting = CountingEstimator()
    sim.estimator = counting
    outcome = sim.run()
    assert all(run.finished_at is not None for run in outcome.runs)
    # every job has the same features: one question at the arrivals, one by each lesson
    # itself (it predicts before it learns), one per lesson while jobs still waited (the
    # last lesson finds none waiting), however many jobs waited
    assert len(set(counting.asked)) == 1
    assert len(counting.asked) == 1 + len(rows) + (len(rows) - 1)


def test_a_decay_step_gives_the_numbers_of_one_call_per_key() -> None:
    """``Decay.step`` moves every usage as ``accrue`` (holders, new ones included) and
    ``decay`` (the others) do, to the last bit: a replay's standings must not move."""
    decayed = Decay(37.25, 3600.0)
    usage = {"a": 12.5, "b": 1e6, "c": 3.0}
    held: dict[str, float] = {"b": 16.0, "d": 3.0}
    expected = {
        "a": decayed.decay(12.5),
        "b": decayed.accrue(1e6, 16.0),
        "c": decayed.decay(3.0),
        "d": decayed.accrue(0.0, 3.0),
    }
    decayed.step(usage, held)
    assert usage == expected
    assert list(usage) == ["a", "b", "c", "d"]  # the new holder joins at the end
