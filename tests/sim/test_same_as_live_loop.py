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

from kiban.platform import Platform
from kiban.scheduler.decisions import Decisions
from kiban.scheduler.snapshot import Snapshot
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


def drive_live(platform: Platform, executor: FakeExecutor, clock: ManualClock) -> list[Start]:
    origin = clock.now()
    arrivals = sorted(SCENARIO, key=lambda s: s.at)
    by_name = {s.name: s for s in SCENARIO}
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
    b = next(j for j, n in names.items() if n == "b")
    e = next(j for j, n in names.items() if n == "e")
    assert (live_job(platform, b).attempt, live_job(platform, b).preempted_by) == (2, e)
    return starts


def drive_sim(tmp_path: Path) -> list[Start]:
    rows = [
        f"{s.at},{s.duration},{s.replicas * s.gpu},default,{s.priority or ''},{s.replicas},"
        f"{s.gpu},{s.limit or ''}"
        for s in SCENARIO
    ]
    trace = write_csv(tmp_path / "scripted.csv", rows)
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER)
    options = SimOptions(trace=trace, cluster_file=cluster, rho=False)
    prepared = prepare(options)
    names = {f"job-{i + 2}": s.name for i, s in enumerate(SCENARIO)}
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
    assert preempted == {"a": 0, "b": 1, "c": 0, "d": 0, "e": 0}
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
