"""``kiban bench control``: the control plane's passes with many running jobs and services, and
how long a transaction on a job waits while a service's readiness probe hangs.

One throwaway store (SQLite) and a fake executor; ``--running`` training jobs and ``--services``
inference services of one replica each are made to run. Then:

1. The service controller's pass (``services.run_once``) and the control loop's pass
   (``loop.run_once``), each ``--passes`` times, every replica answering its probe at once.
2. A pass in which the first service was deleted (its replica is cancelled in that pass) while
   the last service's probe hangs ``--hang`` seconds: meanwhile, a user's cancel of the first
   service's replica and the control loop's settling (each job it may change locked in its own
   transaction) are timed. The longest is what a settling transaction waits for a row lock (on
   SQLite, the store's write lock) that the service controller holds while it probes.

``--against DIR`` runs the same measurement on the checkout in ``DIR`` (its ``src``), in a
subprocess, and reports both side by side with their ratios: before and after a change, on the
same machine in one run. ``--rounds N`` alternates the two N times; each figure is the median
of its rounds. This module runs there as a script, so it imports only what every
kiban since the service controller has (``build_platform``, ``FakeExecutor``, the services).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar, Self

from sqlalchemy.orm import Session, sessionmaker

GPUS_PER_NODE = 8


@dataclass(frozen=True)
class ControlBenchOptions:
    running: int = 1_000
    services: int = 100
    passes: int = 10
    hang_s: float = 2.0
    against: Path | None = None
    rounds: int = 1

    def __post_init__(self) -> None:
        if self.rounds < 1:
            raise ValueError(f"--rounds must be at least 1; got {self.rounds}")
        if self.running < 0:
            raise ValueError(f"--running must be 0 or more; got {self.running}")
        if self.services < 2:
            raise ValueError(f"--services must be at least 2; got {self.services}")
        if self.passes < 1:
            raise ValueError(f"--passes must be at least 1; got {self.passes}")
        if not 0 < self.hang_s <= 25:
            raise ValueError(
                f"--hang must be more than 0 and at most 25 seconds; got {self.hang_s}"
            )
        if self.against is not None and not (self.against / "src" / "kiban").is_dir():
            raise ValueError(f"--against: {self.against} is no kiban checkout (no src/kiban)")


class _Probe:
    """Every replica answers at once, except that while ``hang`` names a service, its
    replicas' probes wait (``entered`` says one began) until ``release`` or ``hang_s``."""

    def __init__(self, hang_s: float) -> None:
        self.hang: str | None = None
        self.hang_s = hang_s
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, address: str, path: str) -> bool:
        if self.hang is not None and address.startswith(f"{self.hang}-"):
            self.entered.set()
            self.release.wait(self.hang_s)
        return True


def _service(name: str) -> dict[str, Any]:
    spec = {"model": {"name": "tiny", "storageUri": "file:///models/tiny"}, "resources": {"gpu": 1}}
    return {"apiVersion": "kiban/v1", "kind": "Service", "metadata": {"name": name}, "spec": spec}


def _training(name: str) -> dict[str, Any]:
    task = {"replicas": 1, "resources": {"gpu": 1}, "command": ["python", "train.py"]}
    return {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"tasks": [task]},
    }


class _LockingSession(Session):
    """A session that times itself, from entering to leaving its ``with``, when it locked a
    job (``get(..., with_for_update=True)``, as settling each job does)."""

    locked: ClassVar[list[float]] = []

    def __enter__(self) -> Self:
        self._began, self._locks = time.perf_counter(), False
        return super().__enter__()

    def get(self, *args: Any, **kwargs: Any) -> Any:
        self._locks = self._locks or bool(kwargs.get("with_for_update"))
        return super().get(*args, **kwargs)

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        if getattr(self, "_locks", False):
            _LockingSession.locked.append(time.perf_counter() - self._began)


def _locking_timed(sessions: sessionmaker[Session]) -> sessionmaker[Session]:
    """``sessions`` whose transactions that lock a job are timed (``_LockingSession.locked``)."""
    _LockingSession.locked.clear()
    return sessionmaker(**{**sessions.kw, "class_": _LockingSession})


def _timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def measure(running: int, services: int, passes: int, hang_s: float) -> dict[str, Any]:
    """The measurement on the kiban this process imports (see the module's steps)."""
    from sqlalchemy import func, select

    from kiban.executors.base import NodeInfo
    from kiban.platform import build_platform
    from kiban.services import jobs, serving
    from kiban.services.auth import Principal
    from kiban.store.models import Job
    from kiban.testing import FakeExecutor, ManualClock

    admin = Principal(name="admin", tenant=None, is_admin=True)
    gpus = running + services
    nodes = [
        NodeInfo(
            f"node-{i}", GPUS_PER_NODE, 64_000, 512 * 2**30, {"kubernetes.io/hostname": f"node-{i}"}
        )
        for i in range(-(-gpus // GPUS_PER_NODE))
    ]
    clock = ManualClock()
    with tempfile.TemporaryDirectory(prefix="kiban-bench-control-") as home:
        executor = FakeExecutor(nodes, clock=clock)
        platform = build_platform(home=Path(home), db_url=None, executor=executor, clock=clock)
        try:
            probe = _Probe(hang_s)
            controller = platform.services
            controller.probe = probe
            controller.gather_timeout_s = hang_s + 30  # (a newer controller's bound on probes)
            names = [f"svc{i:04d}" for i in range(services)]
            with platform.sessions() as session:
                for i in range(running):
                    jobs.submit(
                        session, admin, _training(f"train{i}"), facts=platform.facts, at=0.0
                    )
                for name in names:
                    serving.apply(session, admin, _service(name), facts=platform.facts, at=0.0)
                session.commit()
            total = running + services
            for _ in range(200):
                controller.run_once()
                platform.loop.run_once()
                with platform.sessions() as session:
                    query = select(func.count()).select_from(Job).where(Job.state == "Running")
                    if session.scalar(query) == total:
                        break
            else:
                raise RuntimeError(f"not all {total} jobs came to run")
            controller.run_once()
            service_passes = [_timed(controller.run_once) for _ in range(passes)]
            loop_passes = [_timed(platform.loop.run_once) for _ in range(passes)]

            # The first service deleted, and a training job ended: the next pass cancels the
            # service's replica, while the last service's probe hangs; meanwhile the control
            # loop settles the ended job and a user cancels that replica, side by side.
            first, last = names[0], names[-1]
            with platform.sessions() as session:
                victim = session.scalars(
                    select(Job.id).where(Job.name == f"{first}-00001-0", Job.state == "Running")
                ).one()
                ended = session.scalars(select(Job.id).where(Job.name == "train0")).first()
                serving.delete(session, admin, first, clock.now())
                session.commit()
            if ended is not None:
                executor.finish_all(ended, exit_code=0)

            def cancel() -> None:
                with platform.sessions() as session:
                    jobs.cancel(session, admin, victim, clock.now())
                    session.commit()

            probe.hang = last
            settler = platform.loop.settler
            plain = settler.sessions
            settler.sessions = _locking_timed(plain)
            with ThreadPoolExecutor(3) as pool:
                reconciling = pool.submit(controller.run_once)
                if not probe.entered.wait(60):
                    raise RuntimeError("the pass never probed the hanging replica")
                cancelling = pool.submit(_timed, cancel)
                settling = pool.submit(_timed, lambda: platform.loop.settle(clock.now()))
                cancel_s, settle_s = cancelling.result(timeout=60), settling.result(timeout=60)
                probe.release.set()
                reconciling.result(timeout=60)
            settler.sessions = plain
        finally:
            platform.close()
    return {
        "service_pass_p50_ms": statistics.median(service_passes) * 1000,
        "service_pass_max_ms": max(service_passes) * 1000,
        "loop_pass_p50_ms": statistics.median(loop_passes) * 1000,
        "loop_pass_max_ms": max(loop_passes) * 1000,
        "cancel_during_hang_ms": cancel_s * 1000,
        "settle_during_hang_ms": settle_s * 1000,
        "longest_settling_lock_ms": max(_LockingSession.locked, default=0.0) * 1000,
    }


def _measure_elsewhere(checkout: Path, options: ControlBenchOptions) -> dict[str, Any]:
    """``measure`` run on another checkout's kiban, in a subprocess."""
    environment = {**os.environ, "PYTHONPATH": str(checkout / "src")}
    arguments = [
        str(options.running),
        str(options.services),
        str(options.passes),
        str(options.hang_s),
    ]
    done = subprocess.run(
        [sys.executable, __file__, *arguments],
        env=environment,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the measurement on {checkout} failed: {done.stderr.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def run_control_bench(options: ControlBenchOptions, say: Callable[[str], None]) -> dict[str, Any]:
    """This checkout's figures and, with ``--against``, the other's and the ratios (other /
    this: above 1, this one is faster)."""
    from kiban.bench.machine import describe_machine

    machine = describe_machine()
    runs: list[dict[str, Any]] = []
    others: list[dict[str, Any]] = []
    for round_ in range(1, options.rounds + 1):  # alternating: the machine's load drifts
        say(f"round {round_}: {options.running} running jobs, {options.services} services")
        runs.append(measure(options.running, options.services, options.passes, options.hang_s))
        if options.against is not None:
            say(f"round {round_}: the same on {options.against}")
            others.append(_measure_elsewhere(options.against, options))
    this = _medians(runs)
    report: dict[str, Any] = {
        "bench": "control",
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(options).items()},
        "machine": machine,
        "store": "sqlite",
        "this": this,
    }
    if others:
        other = report["against"] = _medians(others)
        report["ratio"] = {key: (other[key] / this[key] if this[key] > 0 else None) for key in this}
    report["machine"]["load_average_after"] = (
        round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None
    )
    return report


def _medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over the rounds."""
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


ROWS = [
    (
        "service controller pass, p50",
        "service_pass_p50_ms",
        "every service observed, probed, planned, applied",
    ),
    ("service controller pass, max", "service_pass_max_ms", ""),
    ("control loop pass, p50", "loop_pass_p50_ms", "settle, schedule, launch: one run_once"),
    ("control loop pass, max", "loop_pass_max_ms", ""),
    (
        "cancel while a probe hangs",
        "cancel_during_hang_ms",
        "a user's cancel of a replica the pass cancels too, beside settle()",
    ),
    (
        "settling while a probe hangs",
        "settle_during_hang_ms",
        "the loop's settle() pass: reads every active job, locks those that change",
    ),
    (
        "longest settling transaction",
        "longest_settling_lock_ms",
        "of settle() above: an ended job locked (FOR UPDATE), settled, committed",
    ),
]


def control_table(report: dict[str, Any]) -> Any:
    """The readable table: this checkout, the other one and their ratio."""
    from rich.table import Table

    from kiban.bench.machine import machine_line

    against = report.get("against")
    table = Table(title="kiban bench control", title_justify="left", header_style="bold")
    table.add_column("measure")
    table.add_column("this checkout", justify="right")
    if against is not None:
        table.add_column(str(report["settings"]["against"]), justify="right")
        table.add_column("ratio", justify="right")
    table.add_column("what it means", style="dim", overflow="fold")
    for label, key, meaning in ROWS:
        cells = [label, f"{report['this'][key]:,.1f} ms"]
        if against is not None:
            ratio = report["ratio"][key]
            cells += [f"{against[key]:,.1f} ms", "-" if ratio is None else f"{ratio:.2f}x"]
        table.add_row(*cells, meaning)
    settings = report["settings"]
    table.caption = (
        f"{settings['running']:,} running jobs, {settings['services']} services, SQLite, "
        f"probe hang {settings['hang_s']:g} s; machine: {machine_line(report['machine'])}"
    )
    table.caption_justify = "left"
    return table


if __name__ == "__main__":  # run on another checkout by ``--against``
    sys.path.pop(0)  # this folder, whose modules are not the standard library's
    running, services, passes, hang = sys.argv[1:5]
    print(json.dumps(measure(int(running), int(services), int(passes), float(hang))))
