"""``kiban bench kube``: how fast kiban gets pods bound and Running on a real API server.

One local control plane (etcd, kube-apiserver, KWOK; ``kiban dev kube up``'s code) with
``nodes`` fake 8-GPU nodes serves five phases, each on an emptied cluster (every pod deleted,
kiban's Services too: no garbage collector runs there), each timed from its first request until
a watch, in a process of its own, has seen every one of its ``pods`` pods Running:

1. **raw**: the machine's limit. The same client kiban uses creates the pods, ``workers``
   requests in flight, each bound at creation (``nodeName``) as kiban binds them, same pod
   shape (kiban's own manifest of a one-replica job). ``raw_create_pods_per_s`` counts the
   creation calls only; ``raw_running_pods_per_s`` runs to the phase's end like the others.
2. **kube-scheduler** of the same release (client rate limits raised, as kwokctl's
   ``--disable-qps-limits`` raises them) binds the same pods, created the same way with no
   ``nodeName`` (``schedulerName`` left to the default).
3. **kube-scheduler on a backlog**: the same, with every pod created before it starts, timed
   from the first pod it binds: its own pace, apart from the creations.
4. **kiban, one gang**: a job of ``pods`` replicas submitted through the service layer as the
   API submits (validation, the group commit), then the real control loop and the Kubernetes
   executor, in this process, set up as ``kiban up --backend kubernetes`` sets them up.
5. **kiban, single jobs**: ``pods`` one-replica jobs, submitted the same way all at once.

``kiban_pods_per_s`` is the slower of 4 and 5; the goals are at least 80 % of
``raw_create_pods_per_s`` and at least 3x ``kube_scheduler_pods_per_s`` (phase 2: like
kiban's, from the first request to all Running).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from kiban.bench.kubeload import (
    RunningWatch,
    WatchResult,
    core_api,
    create_pods,
    empty_cluster,
    ensure_namespace,
)
from kiban.bench.loadgen import BenchError
from kiban.bench.machine import describe_machine
from kiban.devtools.kube import (
    ControlPlane,
    ControlPlaneOptions,
    FakeNodeSpec,
    require_binaries,
    running_processes,
    start_control_plane,
    supervisor,
)
from kiban.domain.manifests import parse_job_manifest
from kiban.executors.base import LaunchRequest
from kiban.executors.kubernetes import KubernetesExecutor, KubernetesOptions, connect
from kiban.executors.kubernetes.executor import LAUNCH_WORKERS
from kiban.executors.kubernetes.naming import MANAGED_SELECTOR
from kiban.executors.kubernetes.pods import pod_manifest
from kiban.scheduler.decisions import ReplicaPlacement

GOAL_VS_RAW = 0.8
GOAL_VS_KUBE_SCHEDULER = 3.0
IMAGE = "registry.example/train:1"
PHASE_LABEL = "kiban.dev/bench-phase"
BENCH_NAMESPACE = "kiban-bench"

Progress = Callable[[str], None]


@dataclass(frozen=True)
class KubeBenchOptions:
    """The cluster, the pods of each phase, and the bounds."""

    nodes: int = 1_000
    pods: int = 1_000
    gpus_per_pod: int = 8
    workers: int = LAUNCH_WORKERS
    phase_timeout_s: float = 600.0
    directory: Path | None = None

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.pods < 1:
            raise ValueError("--nodes and --pods must be at least 1")
        if not 0 <= self.gpus_per_pod <= 8:
            raise ValueError("--gpus-per-pod must be between 0 and 8 (the nodes have 8)")
        if self.gpus_per_pod and self.pods > self.nodes * (8 // self.gpus_per_pod):
            raise ValueError(
                f"{self.pods} pods of {self.gpus_per_pod} GPUs do not fit on {self.nodes} nodes"
            )
        if self.workers < 1:
            raise ValueError("--workers must be at least 1")


def job_document(name: str, replicas: int, gpus: int) -> dict[str, Any]:
    """A kiban/v1 job of one task: ``replicas`` replicas of ``gpus`` GPUs that run until
    deleted (no ``kiban.dev/sim-duration``)."""
    return {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "tasks": [
                {
                    "name": "worker",
                    "replicas": replicas,
                    "image": IMAGE,
                    "resources": {"gpu": gpus, "cpu": 1, "memory": "1Gi"},
                    "command": ["python", "train.py"],
                }
            ]
        },
    }


def raw_pod_bodies(options: KubeBenchOptions, nodes: list[str], phase: str) -> list[dict[str, Any]]:
    """The pods of the raw and kube-scheduler phases: kiban's own manifest of a one-replica
    job, renamed per pod and labelled with the phase; bound to a node only for ``raw``."""
    spec = parse_job_manifest(job_document("bench", 1, options.gpus_per_pod)).spec
    per_node = 8 // options.gpus_per_pod if options.gpus_per_pod else options.pods
    bodies = []
    for i in range(options.pods):
        placement = ReplicaPlacement(
            "worker", 0, 0, nodes[i // per_node], tuple(range(options.gpus_per_pod)), 1000, 2**30
        )
        request = LaunchRequest(f"{phase}-{i}", "bench", "bench", 1, spec, (placement,), 29500)
        body = pod_manifest(request, placement, BENCH_NAMESPACE, KubernetesOptions())
        body["metadata"]["name"] = f"{phase}-{i}"
        body["metadata"]["labels"] = {PHASE_LABEL: phase}
        if phase != "raw":
            del body["spec"]["nodeName"]
        bodies.append(body)
    return bodies


def rate(pods: int, seconds: float) -> float:
    return round(pods / seconds, 1) if seconds > 0 else 0.0


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def summarize(report: dict[str, Any]) -> dict[str, Any]:
    """The headline figures and ratios of a report's phases (pure: used by the tests too)."""
    raw = report["raw"]
    sched = report["kube_scheduler"]
    kiban = min(report["kiban_gang"]["pods_per_s"], report["kiban_jobs"]["pods_per_s"])
    vs_raw = ratio(kiban, raw["create_pods_per_s"])
    vs_sched = ratio(kiban, sched["pods_per_s"])
    return {
        "kiban_pods_per_s": kiban,
        "kiban_gang_pods_per_s": report["kiban_gang"]["pods_per_s"],
        "kiban_jobs_pods_per_s": report["kiban_jobs"]["pods_per_s"],
        "raw_create_pods_per_s": raw["create_pods_per_s"],
        "raw_running_pods_per_s": raw["pods_per_s"],
        "kube_scheduler_pods_per_s": sched["pods_per_s"],
        "kube_scheduler_backlog_pods_per_s": report["kube_scheduler_backlog"]["pods_per_s"],
        "kiban_vs_raw": vs_raw,
        "kiban_vs_kube_scheduler": vs_sched,
        "goals": {"kiban_vs_raw": GOAL_VS_RAW, "kiban_vs_kube_scheduler": GOAL_VS_KUBE_SCHEDULER},
        "goals_met": {
            "kiban_vs_raw": vs_raw is not None and vs_raw >= GOAL_VS_RAW,
            "kiban_vs_kube_scheduler": vs_sched is not None and vs_sched >= GOAL_VS_KUBE_SCHEDULER,
        },
    }


def phase_result(
    watch: WatchResult, started: float, nodes: set[str], timed_from: float | None = None
) -> dict[str, Any]:
    """What every phase reports: its rate (from ``timed_from``, by default ``started``, to the
    last pod seen Running), when its pods were created (after ``started``), whether every pod
    ran on one of the fake nodes."""
    ended = max(watch.running.values(), default=started)
    created = sorted(watch.seen.values())
    bound = {watch.nodes.get(uid) for uid in watch.running}
    timed_from = started if timed_from is None else timed_from
    return {
        "pods": watch.target,
        "pods_running": len(watch.running),
        "seconds": round(ended - timed_from, 3),
        "pods_per_s": rate(watch.target, ended - timed_from),
        "first_created_s": round(created[0] - started, 3) if created else None,
        "last_created_s": round(created[-1] - started, 3) if created else None,
        "pods_on_fake_nodes": len(bound & nodes) == len(bound) and None not in bound,
    }


class KubeBench:
    """The five phases on one control plane (see the module docstring)."""

    def __init__(self, plane: ControlPlane, options: KubeBenchOptions, say: Progress) -> None:
        self.plane = plane
        self.options = options
        self.say = say
        self.nodes = list(plane.node_names)

    def _watch(self, selector: str) -> RunningWatch:
        watch = RunningWatch(
            self.plane.kubeconfig, selector, self.options.pods, self.options.phase_timeout_s
        )
        watch.start()
        return watch

    def client_phase(self, phase: str) -> dict[str, Any]:
        """raw, kube-scheduler or kube-scheduler-backlog: the bench creates the pods itself.

        For the backlog, every pod is created before kube-scheduler starts: its rate is then
        from the first pod it bound to the last Running, its own pace without the creations.
        """
        options = self.options
        bodies = raw_pod_bodies(options, self.nodes, phase)
        backlog = phase == "kube-scheduler-backlog"
        run_dir = self.plane.directory / "run"
        with core_api(self.plane.kubeconfig, pool=options.workers + 2) as api:
            empty_cluster(api)
            ensure_namespace(api, BENCH_NAMESPACE)
            scheduler = None
            if phase == "kube-scheduler":
                scheduler = self.plane.start_kube_scheduler()
            watch = self._watch(f"{PHASE_LABEL}={phase}")
            try:
                cpu = cpu_seconds(self.plane.directory)
                started = time.monotonic()
                create_s = create_pods(api, BENCH_NAMESPACE, bodies, options.workers)
                if backlog:
                    scheduler = self.plane.start_kube_scheduler()
                seen = watch.wait()
                cpu = cpu_ms_per_pod(cpu, cpu_seconds(self.plane.directory), options.pods)
            finally:
                watch.stop()
                if scheduler is not None:
                    supervisor.stop_from_pid_file(supervisor.pid_file(run_dir, scheduler.name))
            first_bind = min(seen.bound.values()) if backlog else None
            result = phase_result(seen, started, set(self.nodes), first_bind)
            result["create_s"] = round(create_s, 3)
            result["create_pods_per_s"] = rate(options.pods, create_s)
            result["cpu_ms_per_pod"] = cpu
            empty_cluster(api)
        return result

    def kiban_phase(self, gang: bool, home: Path) -> dict[str, Any]:
        """kiban's platform, loop and executor in this process; submissions as the API makes."""
        from kiban.bench.scheduler import server_gc
        from kiban.platform import build_platform
        from kiban.services import jobs
        from kiban.services.auth import Principal

        options = self.options
        admin = Principal(name="admin", tenant=None, is_admin=True)
        if gang:
            documents = [job_document("gang", options.pods, options.gpus_per_pod)]
        else:
            documents = [
                job_document(f"single-{i}", 1, options.gpus_per_pod) for i in range(options.pods)
            ]
        with core_api(self.plane.kubeconfig, pool=4) as api:
            empty_cluster(api)
            executor = KubernetesExecutor(
                connect(self.plane.kubeconfig), KubernetesOptions(default_image=IMAGE)
            )
            platform = build_platform(home=home, db_url=None, executor=executor)
            watch = self._watch(MANAGED_SELECTOR)
            try:
                with server_gc():
                    platform.loop.start()
                    cpu = cpu_seconds(self.plane.directory)
                    started = time.monotonic()
                    futures = []
                    for document in documents:
                        with platform.sessions() as session:
                            prepared = jobs.prepare_submission(
                                session,
                                admin,
                                document,
                                facts=platform.facts,
                                at=platform.clock.now(),
                                policy=platform.policy,
                            )
                        futures.append(platform.submissions.write(prepared.job, *prepared.events))
                        platform.loop.wake()
                    for future in futures:
                        future.result(timeout=options.phase_timeout_s)
                    submitted = time.monotonic()
                    seen = watch.wait()
                    cpu = cpu_ms_per_pod(cpu, cpu_seconds(self.plane.directory), options.pods)
                    passes = platform.loop.passes
            finally:
                watch.stop()
                platform.close()
            result = phase_result(seen, started, set(self.nodes))
            result["jobs"] = len(documents)
            result["submit_s"] = round(submitted - started, 3)
            result["loop_passes"] = passes
            result["cpu_ms_per_pod"] = cpu
            empty_cluster(api)
        return result


def _control_plane_rss(directory: Path) -> dict[str, float]:
    """Resident memory of each control-plane process now, in MB."""
    sizes = {}
    for record in running_processes(directory):
        try:
            sizes[record.name] = round(psutil.Process(record.pid).memory_info().rss / 2**20, 1)
        except psutil.Error:
            continue
    return sizes


def cpu_seconds(directory: Path) -> dict[str, float]:
    """CPU time (user + system) used so far by this process and by each control-plane process
    (kube-scheduler only while it runs)."""
    times = {"this process": sum(psutil.Process().cpu_times()[:2])}
    for record in running_processes(directory):
        with contextlib.suppress(psutil.Error):
            times[record.name] = sum(psutil.Process(record.pid).cpu_times()[:2])
    return times


def cpu_ms_per_pod(
    before: dict[str, float], after: dict[str, float], pods: int
) -> dict[str, float]:
    """Each process's CPU time over a phase, in milliseconds per pod (what each pod costs)."""
    return {
        name: round((after[name] - before.get(name, 0.0)) * 1000 / pods, 2)
        for name in after
        if pods
    }


def run_kube_bench(options: KubeBenchOptions, say: Progress | None = None) -> dict[str, Any]:
    """Start the control plane, run the five phases, stop it; the report."""
    progress: Progress = say or (lambda _: None)
    require_binaries()
    machine = describe_machine()
    scratch = Path(tempfile.mkdtemp(prefix="kiban-bench-kube-"))
    directory = options.directory or scratch / "kube"
    report: dict[str, Any] = {}
    try:
        progress(f"starting the control plane with {options.nodes:,} fake 8-GPU nodes")
        started = time.monotonic()
        spec = FakeNodeSpec(count=options.nodes, gpus=8)
        with start_control_plane(
            directory, ControlPlaneOptions(nodes=spec, start_timeout=max(120.0, options.nodes / 10))
        ) as plane:
            setup_s = time.monotonic() - started
            progress(f"control plane ready in {setup_s:.1f} s")
            bench = KubeBench(plane, options, progress)
            phases: list[tuple[str, Callable[[], dict[str, Any]]]] = [
                ("raw", lambda: bench.client_phase("raw")),
                ("kube_scheduler", lambda: bench.client_phase("kube-scheduler")),
                ("kube_scheduler_backlog", lambda: bench.client_phase("kube-scheduler-backlog")),
                ("kiban_gang", lambda: bench.kiban_phase(True, scratch / "home-gang")),
                ("kiban_jobs", lambda: bench.kiban_phase(False, scratch / "home-jobs")),
            ]
            for key, run in phases:
                progress(f"{key}: {options.pods:,} pods")
                report[key] = entry = run()
                progress(
                    f"{key}: {entry['pods_per_s']:,.1f} pods/s "
                    f"({entry['pods_running']:,} Running in {entry['seconds']:.2f} s)"
                )
            rss = _control_plane_rss(plane.directory)
    except BenchError:
        raise
    except Exception as exc:
        raise BenchError(f"{type(exc).__name__}: {exc}") from exc
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    report.update(summarize(report))
    report["settings"] = {
        "nodes": options.nodes,
        "gpus_per_node": 8,
        "pods": options.pods,
        "gpus_per_pod": options.gpus_per_pod,
        "workers": options.workers,
        "control_plane_setup_s": round(setup_s, 1),
        "control_plane_rss_mb": rss,
    }
    if hasattr(os, "getloadavg"):
        machine["load_average_after"] = round(os.getloadavg()[0], 2)
    report["machine"] = machine
    return report
