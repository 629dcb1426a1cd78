"""The simulator and the live control loop make the same decisions on one scripted scenario.

The loop runs with the fake executor and a manual clock; the test plays the cluster: it submits
each job at its time, and ends each job's replicas when the job has run its duration. The
simulator replays the same jobs from a trace on the same nodes and policy. Both must start the
same jobs at the same times on the same GPUs, and preempt the same job.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sim_support import live_job, live_submit, write_csv

from kiban.domain.manifests import load_document
from kiban.platform import Platform
from kiban.scheduler.decisions import Decisions
from kiban.scheduler.snapshot import Snapshot
from kiban.services.policy import apply_policy
from kiban.sim.engine import Simulator
from kiban.sim.policies import policy_named
from kiban.sim.run import SimOptions, prepare
from kiban.testing import FakeExecutor, ManualClock, manifest


@dataclass(frozen=True)
class Scripted:
    name: str
    at: float
    duration: float
    replicas: int
    gpu: int
    priority: str | None = None
    limit: float | None = None


# Three nodes of 2 GPUs (the fake executor's nodes in tests/conftest.py), the default policy.
# a and b fill 6 GPUs; c (a 4-GPU gang) gets a reservation at a's maxRuntime end; d waits
# behind c (StrictFIFO); e (priority high) preempts b, which returns to its queue; at 100 b and
# c start, d when they end.
SCENARIO = [
    Scripted("a", 0, 100, 2, 2, limit=200),
    Scripted("b", 10, 80, 1, 2, limit=100),
    Scripted("c", 20, 80, 2, 2),
    Scripted("d", 30, 20, 1, 1, limit=30),
    Scripted("e", 60, 40, 1, 2, priority="high"),
]
CLUSTER = """
nodes:
  - {name: node-0, gpus: 2, labels: {kubernetes.io/hostname: node-0}}
  - {name: node-1, gpus: 2, labels: {kubernetes.io/hostname: node-1}}
  - {name: node-2, gpus: 2, labels: {kubernetes.io/hostname: node-2}}
"""
Start = tuple[float, str, tuple[tuple[str, tuple[int, ...]], ...]]


def drive_live(
    platform: Platform,
    executor: FakeExecutor,
    clock: ManualClock,
    scenario: list[Scripted] = SCENARIO,
    check: bool = True,
) -> list[Start]:
    origin = clock.now()
    arrivals = sorted(scenario, key=lambda s: s.at)
    by_name = {s.name: s for s in scenario}
    names: dict[str, str] = {}
    ends: dict[str, float] = {}
    seen = 0
    starts: list[Start] = []
    while arrivals or ends:
        t = min([*([arrivals[0].at] if arrivals else []), *ends.values()])
        clock.advance(origin + t - clock.now())
        for job_id, end in list(ends.items()):
            if end == t:
                executor.finish_all(job_id)
                del ends[job_id]
        while arrivals and arrivals[0].at == t:
            s = arrivals.pop(0)
            spec: dict[str, object] = {}
            if s.priority:
                spec["priorityClass"] = s.priority
            if s.limit:
                spec["maxRuntime"] = f"{s.limit:g}s"
            document = manifest(s.name, replicas=s.replicas, gpu=s.gpu, **spec)
            names[live_submit(platform, document)] = s.name
        for _ in range(4):  # a preemption takes a second pass: the victim stops, then the start
            platform.loop.run_once()
        for job_id in [j for j in ends if live_job(platform, j).state == "Pending"]:
            del ends[job_id]  # preempted
        for launch in executor.launches[seen:]:
            name = names[launch.job_id]
            placed = tuple(sorted((p.node, p.gpu_ids) for p in launch.placements))
            starts.append((t, name, placed))
            ends[launch.job_id] = t + by_name[name].duration
        seen = len(executor.launches)
    if not check:
        return starts
    b = next(j for j, n in names.items() if n == "b")
    e = next(j for j, n in names.items() if n == "e")
    assert (live_job(platform, b).attempt, live_job(platform, b).preempted_by) == (2, e)
    return starts


def drive_sim(
    tmp_path: Path,
    scenario: list[Scripted] = SCENARIO,
    cluster_file: str = CLUSTER,
    preemptions: dict[str, int] | None = None,
) -> list[Start]:
    rows = [
        f"{s.at},{s.duration},{s.replicas * s.gpu},default,{s.priority or ''},{s.replicas},"
        f"{s.gpu},{s.limit or ''}"
        for s in scenario
    ]
    trace = write_csv(tmp_path / "scripted.csv", rows)
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(cluster_file)
    options = SimOptions(trace=trace, cluster_file=cluster, rho=False)
    prepared = prepare(options)
    names = {f"job-{i + 2}": s.name for i, s in enumerate(scenario)}
    starts: list[Start] = []

    def note(snapshot: Snapshot, decisions: Decisions) -> None:
        for admit in decisions.admitted:
            placed = tuple(sorted((p.node, p.gpu_ids) for p in admit.placements))
            starts.append((snapshot.now, names[admit.job_id], placed))

    simulator = Simulator(
        prepared.jobs, prepared.cluster, prepared.queues, policy_named("kiban"), on_cycle=note
    )
    outcome = simulator.run()
    preempted = {names[r.job.id]: r.preemptions for r in outcome.runs}
    assert preempted == (preemptions or {"a": 0, "b": 1, "c": 0, "d": 0, "e": 0})
    return starts


def test_the_loop_and_the_simulator_start_the_same_jobs_on_the_same_gpus(
    platform: Platform, executor: FakeExecutor, clock: ManualClock, tmp_path: Path
) -> None:
    live = drive_live(platform, executor, clock)
    simulated = drive_sim(tmp_path)
    assert simulated == live
    assert [(t, name) for t, name, _ in live] == [
        (0, "a"),
        (10, "b"),
        (60, "e"),
        (100, "b"),
        (100, "c"),
        (180, "d"),
    ]


# The same nodes, the default queue LeastAttainedService. long (2 GPUs) and fill (4 GPUs) start
# at 0. At 1,000 fill has run 4,000 GPU-s (level 1, dropped during its run), long 2,000
# (level 0): short (level 0) preempts fill, not long. At 1,300 short ends and fill resumes
# (4,000 GPU-s: level 1 at its start). At 2,000 long has 4,000 GPU-s (dropped to level 1
# during its run) and fill 6,800 (still level 1, the level it resumed at: spared, the bound):
# late preempts long, which resumes when late ends at 2,100. The live loop reads each job's
# attained service from its ended replicas; the simulator keeps it.
LAS_SCENARIO = [
    Scripted("long", 0, 5000, 1, 2),
    Scripted("fill", 0, 4000, 2, 2),
    Scripted("short", 1000, 300, 1, 2),
    Scripted("late", 2000, 100, 1, 2),
]
LAS_QUEUES = """
queues:
  - {name: default, strategy: LeastAttainedService}
"""


def test_the_loop_and_the_simulator_agree_on_least_attained_service_queues(
    platform: Platform, executor: FakeExecutor, clock: ManualClock, tmp_path: Path
) -> None:
    with platform.sessions() as session:
        apply_policy(session, load_document(LAS_QUEUES), actor="test", at=clock.now())
        session.commit()
    live = drive_live(platform, executor, clock, LAS_SCENARIO, check=False)
    simulated = drive_sim(
        tmp_path,
        LAS_SCENARIO,
        CLUSTER + LAS_QUEUES,
        preemptions={"long": 1, "fill": 1, "short": 0, "late": 0},
    )
    assert simulated == live
    assert [(t, name) for t, name, _ in live] == [
        (0, "fill"),
        (0, "long"),
        (1000, "short"),
        (1300, "fill"),
        (2000, "late"),
        (2100, "long"),
    ]


# The same nodes, the default queue ShortestExpectedService. fill (6 GPUs) runs from 0 to 100;
# long (2 GPUs, maxRuntime 1,000 s: 2,000 GPU-s expected), short (2 x 100 = 200) and wide
# (4 x 60 = 240) wait, in that order of arrival. At 100 the 6 free GPUs go to short and wide,
# the smallest expected first (first come would start long and short, and wide would wait);
# long starts when short ends at 130.
QSSF_SCENARIO = [
    Scripted("fill", 0, 100, 3, 2, limit=200),
    Scripted("long", 10, 50, 1, 2, limit=1000),
    Scripted("short", 20, 30, 1, 2, limit=100),
    Scripted("wide", 30, 40, 2, 2, limit=60),
]
QSSF_QUEUES = """
queues:
  - {name: default, strategy: ShortestExpectedService}
"""


def test_the_loop_and_the_simulator_agree_on_shortest_expected_service_queues(
    platform: Platform, executor: FakeExecutor, clock: ManualClock, tmp_path: Path
) -> None:
    with platform.sessions() as session:
        apply_policy(session, load_document(QSSF_QUEUES), actor="test", at=clock.now())
        session.commit()
    live = drive_live(platform, executor, clock, QSSF_SCENARIO, check=False)
    simulated = drive_sim(
        tmp_path,
        QSSF_SCENARIO,
        CLUSTER + QSSF_QUEUES,
        preemptions={"fill": 0, "long": 0, "short": 0, "wide": 0},
    )
    assert simulated == live
    assert sorted((t, name) for t, name, _ in live) == [
        (0, "fill"),
        (100, "short"),
        (100, "wide"),
        (130, "long"),
    ]
