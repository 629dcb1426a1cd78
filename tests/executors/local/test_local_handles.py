"""The local executor finds a replica by the handle it gave at launch (pid and start time,
stored in the replicas' handle column), and one stored before handles held them by its pid
file, so that jobs survive a restart of kiban across the change."""

from __future__ import annotations

from pathlib import Path

from kiban.domain.manifests import parse_job_manifest
from kiban.executors.base import LaunchRequest, NodeInfo, Observation, ReplicaRef
from kiban.executors.local import LocalExecutor
from kiban.executors.local.executor import parse_process_handle, process_identity
from kiban.scheduler.decisions import ReplicaPlacement
from kiban.testing.waiting import eventually


def sleeper(executor: LocalExecutor, job_id: str) -> ReplicaRef:
    document = {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {"name": "sleeper"},
        "spec": {"tasks": [{"command": ["sleep", "600"]}]},
    }
    spec = parse_job_manifest(document).spec
    placement = ReplicaPlacement("worker", 0, 0, "node-0", (), 100, 2**26)
    (up,) = executor.launch(LaunchRequest(job_id, "sleeper", "t", 1, spec, (placement,), 29500))
    return ReplicaRef(job_id, 1, "worker", 0, 0, up.handle)


def test_the_handle_is_the_shims_pid_and_start_time_as_in_its_pid_file(tmp_path: Path) -> None:
    executor = LocalExecutor(tmp_path / "home", [NodeInfo("node-0", 0, 1000, 2**30)])
    ref = sleeper(executor, "handle-abc")
    try:
        assert ref.handle is not None
        identity = parse_process_handle(ref.handle)
        assert identity is not None
        pid, started = identity
        assert process_identity(pid) == started
        pid_file = tmp_path / "home" / "jobs" / "handle-abc" / "attempt-1" / "rank-0.pid"
        assert pid_file.read_text().strip() == ref.handle
    finally:
        executor.stop(ref, force=True)
        executor.close()


def test_a_replica_stored_without_a_handle_is_found_by_its_pid_file(tmp_path: Path) -> None:
    """A restarted kiban (a new executor) observes and stops a replica whose row has no handle
    (stored before the local executor gave one)."""
    first = LocalExecutor(tmp_path / "home", [NodeInfo("node-0", 0, 1000, 2**30)])
    launched = sleeper(first, "old-row-abc")
    first.close()
    restarted = LocalExecutor(tmp_path / "home", [NodeInfo("node-0", 0, 1000, 2**30)])
    stored = ReplicaRef("old-row-abc", 1, "worker", 0, 0, None)
    try:
        assert restarted.observe(stored).running
        assert restarted.group_alive(stored)
        restarted.stop(stored, force=False)

        def ended() -> Observation | None:
            observed = restarted.observe(stored)
            return None if observed.running else observed

        seen = eventually(ended, timeout=30, what="the end")
        assert seen.exit_code != 0  # ended by the signal, recorded by its shim
    finally:
        restarted.stop(launched, force=True)
        restarted.close()


def test_a_handle_that_is_not_one_finds_nothing(tmp_path: Path) -> None:
    executor = LocalExecutor(tmp_path / "home", [NodeInfo("node-0", 0, 1000, 2**30)])
    bogus = ReplicaRef("bogus-abc", 1, "worker", 0, 0, "kiban-t/pod/uid")
    seen = executor.observe(bogus)
    assert not seen.running and seen.lost
    executor.stop(bogus, force=True)  # nothing to signal, and no error
    assert executor.replica_cpu_seconds(bogus) is None
    executor.close()
