"""The executor conformance suite: the same cases against every executor.

What the control loop counts on from an ``Executor`` (launch, observe, stop, abandon, attempts,
nodes) and from the capabilities it declares in ``offers`` (logs, the CPU meter, the checkpoint
probe), written once. A test module subclasses ``ExecutorConformance`` and gives a ``target``
fixture: a ``ConformanceTarget``, the executor under test and how its replicas are made to do
a ``Work`` (a command on this machine, a simulated pod's annotations, a fake's ``finish``)::

    class TestLocalExecutor(ExecutorConformance):
        @pytest.fixture
        def target(self, tmp_path: Path) -> Iterator[ConformanceTarget]:
            ...

pytest collects the inherited ``test_`` methods for each subclass.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from kiban.domain.jobspec import JobSpec
from kiban.domain.manifests import parse_job_manifest
from kiban.executors.base import (
    Capability,
    Executor,
    LaunchedReplica,
    LaunchRequest,
    NodeInfo,
    Observation,
    ReplicaRef,
    checkpoint_detection_unavailable,
    checkpoint_probe,
)
from kiban.scheduler.decisions import ReplicaPlacement
from kiban.testing.waiting import eventually

T = TypeVar("T")

TASK = "worker"
GREETING = "kiban conformance says hello"
"""What every conformance replica prints first (where its target's replicas can print)."""


@dataclass(frozen=True)
class Work:
    """What a conformance job's replicas do: print ``GREETING``, then run until stopped
    (``exit_code`` None) or end at once with ``exit_code``."""

    exit_code: int | None = None


class ConformanceTarget(Protocol):
    """One executor under the suite, and how its replicas are made to do a ``Work``."""

    executor: Executor
    patience_s: float
    """How long a replica may take to start, end or go once stopped, at most."""
    prints: bool
    """Whether its replicas' output reaches their logs (simulated pods print nothing)."""
    lists_attempts: bool
    """Whether ``attempts()`` lists the attempts still running (the local executor's replicas
    end with their stop, as process groups, so it lists none)."""

    def task(self, work: Work) -> dict[str, Any]:
        """The manifest's task (``spec.tasks[0]``, less its name and replicas) doing ``work``."""
        ...

    def started(self, request: LaunchRequest, work: Work) -> None:
        """Called right after a launch: replicas that do not run by themselves (the fake's)
        are made to do ``work`` here."""
        ...

    def write_checkpoint(self, job_id: str) -> float:
        """Write a checkpoint file as the job's replicas would; its modification time."""
        ...


def new_job_id(prefix: str = "conf") -> str:
    """A job id no other case (and no other run on a shared cluster) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@dataclass
class Launched:
    """One launched attempt: its request and the refs of its replicas, by rank."""

    request: LaunchRequest
    replicas: list[LaunchedReplica]

    @property
    def refs(self) -> list[ReplicaRef]:
        placements = {p.rank: p for p in self.request.placements}
        return [
            ReplicaRef(
                self.request.job_id,
                self.request.attempt,
                placements[r.rank].task,
                placements[r.rank].index,
                r.rank,
                r.handle,
            )
            for r in self.replicas
        ]


class ExecutorConformance:
    """The cases; a subclass gives the ``target`` fixture (see the module docstring)."""

    # -- helpers -----------------------------------------------------------------------------
    @staticmethod
    def spec(target: ConformanceTarget, work: Work, replicas: int) -> JobSpec:
        task = {**target.task(work), "name": TASK, "replicas": replicas}
        document = {
            "apiVersion": "kiban/v1",
            "kind": "Job",
            "metadata": {"name": "conformance"},
            "spec": {"tasks": [task]},
        }
        return parse_job_manifest(document).spec

    def launch(
        self,
        target: ConformanceTarget,
        work: Work,
        *,
        replicas: int = 1,
        job_id: str | None = None,
        attempt: int = 1,
    ) -> Launched:
        nodes = sorted(target.executor.nodes(), key=lambda n: n.name)
        assert nodes, "the executor offers no node"
        placements = tuple(
            ReplicaPlacement(TASK, rank, rank, nodes[rank % len(nodes)].name, (), 100, 64 << 20)
            for rank in range(replicas)
        )
        request = LaunchRequest(
            job_id=job_id or new_job_id(),
            job_name="conformance",
            tenant="default",
            attempt=attempt,
            spec=self.spec(target, work, replicas),
            placements=placements,
            master_port=target.executor.pick_master_port(),
        )
        launched = target.executor.launch(request)
        target.started(request, work)
        return Launched(request, launched)

    @staticmethod
    def ended(target: ConformanceTarget, ref: ReplicaRef) -> Observation:
        """The replica's observation once it no longer runs."""

        def gone() -> Observation | None:
            seen = target.executor.observe(ref)
            return None if seen.running else seen

        return eventually(
            gone,
            timeout=target.patience_s,
            what=f"replica {ref.rank} of {ref.job_id} attempt {ref.attempt} to end",
        )

    @staticmethod
    def running(target: ConformanceTarget, ref: ReplicaRef) -> Observation:
        def runs() -> Observation | None:
            seen = target.executor.observe(ref)
            return seen if seen.running else None

        return eventually(
            runs,
            timeout=target.patience_s,
            what=f"replica {ref.rank} of {ref.job_id} to run",
        )

    @staticmethod
    def stop_all(target: ConformanceTarget, launched: Launched) -> None:
        for ref in launched.refs:
            target.executor.stop(ref, force=True)

    # -- nodes -------------------------------------------------------------------------------
    def test_nodes_are_listed_once_each_with_capacity(self, target: ConformanceTarget) -> None:
        nodes = target.executor.nodes()
        assert nodes and all(isinstance(n, NodeInfo) for n in nodes)
        names = [n.name for n in nodes]
        assert len(set(names)) == len(names), f"a node is listed twice: {names}"
        assert all(n.gpus >= 0 and n.cpu_millis > 0 and n.memory > 0 for n in nodes)

    # -- launch and observe --------------------------------------------------------------------
    def test_a_launched_replica_is_observed_running_until_stopped(
        self, target: ConformanceTarget
    ) -> None:
        launched = self.launch(target, Work(exit_code=None), replicas=2)
        try:
            assert sorted(r.rank for r in launched.replicas) == [0, 1]
            handles = [r.handle for r in launched.replicas]
            assert all(handles) and len(set(handles)) == 2, f"handles {handles}"
            for ref in launched.refs:
                seen = self.running(target, ref)
                assert seen.exit_code is None and not seen.lost
        finally:
            self.stop_all(target, launched)

    def test_an_exit_code_of_zero_is_observed_as_such(self, target: ConformanceTarget) -> None:
        launched = self.launch(target, Work(exit_code=0))
        (ref,) = launched.refs
        seen = self.ended(target, ref)
        assert (seen.exit_code, seen.lost) == (0, False)
        self.stop_all(target, launched)

    def test_a_failing_exit_code_is_observed_as_such(self, target: ConformanceTarget) -> None:
        launched = self.launch(target, Work(exit_code=3))
        (ref,) = launched.refs
        seen = self.ended(target, ref)
        assert (seen.exit_code, seen.lost) == (3, False)
        self.stop_all(target, launched)

    def test_a_replica_never_launched_is_observed_lost(self, target: ConformanceTarget) -> None:
        seen = target.executor.observe(ReplicaRef(new_job_id(), 1, TASK, 0, 0, None))
        assert not seen.running and seen.lost

    # -- stop and abandon ----------------------------------------------------------------------
    def test_a_stopped_replica_ends_and_does_not_succeed(self, target: ConformanceTarget) -> None:
        launched = self.launch(target, Work(exit_code=None))
        (ref,) = launched.refs
        self.running(target, ref)
        target.executor.stop(ref, force=False)
        seen = self.ended(target, ref)
        assert seen.lost or seen.exit_code != 0, f"a stopped replica succeeded: {seen}"
        self.stop_all(target, launched)
        target.executor.stop(ref, force=True)  # stopping again is harmless

    def test_abandon_ends_every_replica_of_the_attempt(self, target: ConformanceTarget) -> None:
        launched = self.launch(target, Work(exit_code=None), replicas=2)
        for ref in launched.refs:
            self.running(target, ref)
        target.executor.abandon(launched.request.job_id, launched.request.attempt)
        for ref in launched.refs:
            self.ended(target, ref)
        job = launched.request.job_id
        eventually(
            lambda: (job, 1) not in target.executor.attempts(),
            timeout=target.patience_s,
            what="the abandoned attempt to be gone from attempts()",
        )

    # -- attempts ------------------------------------------------------------------------------
    def test_attempts_are_told_apart(self, target: ConformanceTarget) -> None:
        """A new attempt of a job runs beside its ended one; each is observed, stopped and
        listed by its own number."""
        first = self.launch(target, Work(exit_code=3))
        job = first.request.job_id
        (first_ref,) = first.refs
        assert self.ended(target, first_ref).exit_code == 3
        second = self.launch(target, Work(exit_code=None), job_id=job, attempt=2)
        try:
            (second_ref,) = second.refs
            self.running(target, second_ref)
            assert target.executor.observe(first_ref).exit_code == 3
            if target.lists_attempts:
                eventually(
                    lambda: (job, 2) in target.executor.attempts(),
                    timeout=target.patience_s,
                    what="attempts() to list the running attempt 2",
                )
            target.executor.stop(first_ref, force=True)
            assert self.running(target, second_ref).running
        finally:
            self.stop_all(target, second)
        self.ended(target, second_ref)
        eventually(
            lambda: not {(job, 1), (job, 2)} & target.executor.attempts(),
            timeout=target.patience_s,
            what="attempts() to list neither attempt once both ended",
        )

    # -- capabilities --------------------------------------------------------------------------
    def test_the_cpu_meter_is_declared_with_the_cpu_usage_capability(
        self, target: ConformanceTarget
    ) -> None:
        executor = target.executor
        meter = executor.offers.cpu_meter
        assert (meter is not None) == (Capability.CPU_USAGE in executor.capabilities)
        if meter is None:
            return
        launched = self.launch(target, Work(exit_code=None))
        (ref,) = launched.refs
        try:
            self.running(target, ref)
            used = meter.replica_cpu_seconds(ref)
            assert used is not None and used >= 0.0
        finally:
            self.stop_all(target, launched)
        self.ended(target, ref)
        eventually(
            lambda: meter.replica_cpu_seconds(ref) is None,
            timeout=target.patience_s,
            what="no CPU reading of a replica that ended",
        )

    def test_logs_hold_what_a_replica_printed(self, target: ConformanceTarget) -> None:
        logs = target.executor.offers.logs
        if logs is None:
            return
        launched = self.launch(target, Work(exit_code=0))
        job = launched.request.job_id
        (ref,) = launched.refs
        self.ended(target, ref)
        if not target.prints:
            data, after = logs.read_log(job, 0, 0, 1 << 16)
            assert after == len(data)
            return

        def greeted() -> bytes | None:
            data = logs.read_log(job, 0, 0, 1 << 16)[0]
            return data if GREETING.encode() in data else None

        data = eventually(
            greeted,
            timeout=target.patience_s,
            what="the replica's greeting in its log",
        )
        part, after = logs.read_log(job, 0, 3, 5)
        assert (part, after) == (data[3:8], 8)
        start = logs.log_start(job, 0, tail_lines=1, since=None)
        assert start is not None and GREETING.encode() in data[start:]
        self.stop_all(target, launched)

    def test_the_checkpoint_probe_tells_the_newest_checkpoint(
        self, target: ConformanceTarget
    ) -> None:
        executor = target.executor
        probe = checkpoint_probe(executor)
        unavailable = checkpoint_detection_unavailable(executor)
        if probe is None:
            assert unavailable == f"checkpoint detection unavailable on {executor.name}"
            return
        assert unavailable is None
        launched = self.launch(target, Work(exit_code=None))
        job = launched.request.job_id
        try:
            assert probe.newest_checkpoint(job) is None
            written = target.write_checkpoint(job)
            assert probe.newest_checkpoint(job) == written
            assert probe.newest_checkpoint(new_job_id()) is None  # another job's: none
        finally:
            self.stop_all(target, launched)
