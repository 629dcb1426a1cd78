"""Volcano's svc plugin on the local executor (``spec.hostsFiles``): each replica reads its
job's hosts by task from ``$KIBAN_HOSTS_DIR/<task>.host`` and ``VC_<TASK>_HOSTS``/``_NUM``."""

from __future__ import annotations

from pathlib import Path

from kiban.domain.manifests import parse_job_manifest
from kiban.executors.base import LaunchRequest, ReplicaRef
from kiban.executors.local import LocalExecutor
from kiban.executors.local.nodes import virtual_nodes
from kiban.scheduler.decisions import ReplicaPlacement
from kiban.testing import eventually

READ = (
    'printf "%s|%s|%s|%s\\n" "$VC_PS_HOSTS" "$VC_DATA_WORKER_NUM" "$VC_DATA_WORKER_HOSTS" '
    '"$(tr "\\n" + < "$KIBAN_HOSTS_DIR/data_worker.host")"'
)


def test_each_replica_reads_the_hosts_of_every_task(tmp_path: Path) -> None:
    document = {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {"name": "hj"},
        "spec": {
            "hostsFiles": True,
            "tasks": [
                {"name": "ps", "command": ["sh", "-c", READ]},
                {"name": "data-worker", "replicas": 2, "command": ["sh", "-c", READ]},
            ],
        },
    }
    spec = parse_job_manifest(document).spec
    executor = LocalExecutor(tmp_path / "home", virtual_nodes(3, 0))
    placements = tuple(
        ReplicaPlacement(task, index, rank, f"node-{rank}", (), 100, 2**26)
        for rank, (task, index) in enumerate([("ps", 0), ("data-worker", 0), ("data-worker", 1)])
    )
    launched = executor.launch(LaunchRequest("hj-1", "hj", "t", 1, spec, placements, 29500))
    refs = [
        ReplicaRef("hj-1", 1, p.task, p.index, p.rank, up.handle)
        for p, up in zip(placements, launched, strict=True)
    ]
    eventually(lambda: not any(executor.observe(r).running for r in refs), what="the job to end")
    assert [executor.observe(r).exit_code for r in refs] == [0, 0, 0]
    # the hosts are the replicas' host names (as in an MPI hostfile), the file one a line
    expected = "hj-ps-0|2|hj-data-worker-0,hj-data-worker-1|hj-data-worker-0+hj-data-worker-1"
    for rank in range(3):
        log = (tmp_path / "home" / "jobs" / "hj-1" / f"rank-{rank}.log").read_text()
        assert log.strip() == expected, log


def test_without_hosts_files_no_variables(tmp_path: Path) -> None:
    document = {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {"name": "nh"},
        "spec": {"tasks": [{"name": "ps", "command": ["sh", "-c", 'echo "[$VC_PS_NUM]"']}]},
    }
    spec = parse_job_manifest(document).spec
    executor = LocalExecutor(tmp_path / "home", virtual_nodes(1, 0))
    placement = ReplicaPlacement("ps", 0, 0, "node-0", (), 100, 2**26)
    (up,) = executor.launch(LaunchRequest("nh-1", "nh", "t", 1, spec, (placement,), 29500))
    ref = ReplicaRef("nh-1", 1, "ps", 0, 0, up.handle)
    eventually(lambda: not executor.observe(ref).running, what="the job to end")
    assert (tmp_path / "home" / "jobs" / "nh-1" / "rank-0.log").read_text().strip() == "[]"
