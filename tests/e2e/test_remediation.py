"""Remediation end to end on the local executor, with real ``kiban up`` processes.

A 3-node cluster runs a 2-node job that writes checkpoints; an ECC fault reaches the control
plane for one of its nodes (a report posted as an agent would, and the real node agent that
``kiban up`` runs, reading a fault injected through its reading seam):
the node is cordoned by remediation, the job requeued keeping its submit time and backoff
count, restarted from its checkpoint on the two other nodes, and finishing there. The circuit
breaker bounds a burst of faults. A kill -9 of the control plane just after the fault loses no
job and launches none twice.
"""

from __future__ import annotations

import sqlite3
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2e_support import KibanServer, StartKiban, eventually, job_manifest

from kiban.health.conditions import CheckType
from kiban.testing.health import node_reading, with_gpu
from kiban.testing.health_reports import health_report

pytestmark = pytest.mark.e2e

# Rank 0 writes a checkpoint each step; a first attempt stops at step 3 and waits (to be
# drained), an attempt that finds a checkpoint resumes from it and finishes. Each replica says
# which attempt and rank started, once, so a launch made twice would show.
TRAIN = textwrap.dedent(
    """
    import os, pathlib, time
    rank, attempt = os.environ["RANK"], os.environ["KIBAN_ATTEMPT"]
    ckpt = pathlib.Path(os.environ["KIBAN_CHECKPOINT_DIR"]) / "step"
    start = int(ckpt.read_text()) if ckpt.exists() else 0
    print(f"started attempt {attempt} rank {rank} on {os.environ['KIBAN_NODE']}", flush=True)
    print(f"resumed from {start}", flush=True)
    if start == 0:
        for step in range(1, 4):
            if rank == "0":
                tmp = ckpt.with_suffix(".tmp")
                tmp.write_text(str(step))
                tmp.replace(ckpt)
            print(f"checkpoint {step}", flush=True)
            time.sleep(0.2)
        time.sleep(600)
    print(f"finished from {start}", flush=True)
    """
)
SLEEPER = ("python3", "-c", "import time; time.sleep(600)")
ECC = {CheckType.GPU_ECC: "GPU 0: 1 volatile uncorrectable ECC error"}


def training(kiban: KibanServer) -> str:
    manifest = job_manifest(
        "train",
        ["python3", "-c", TRAIN],
        replicas=2,
        gpu=2,
        restartPolicy="OnFailure",
        backoffLimit=1,
    )
    return kiban.submit(manifest)


def store(kiban: KibanServer, query: str, *args: Any) -> list[tuple[Any, ...]]:
    with sqlite3.connect(kiban.home / "kiban.db") as db:
        return db.execute(query, args).fetchall()


def replica_nodes(kiban: KibanServer, job_id: str) -> dict[int, set[str]]:
    """The nodes of each attempt's replicas."""
    found: dict[int, set[str]] = {}
    for node, attempt in store(
        kiban, "SELECT node, attempt FROM replicas WHERE job_id = ?", job_id
    ):
        found.setdefault(attempt, set()).add(node)
    return found


def report_fault(kiban: KibanServer, node: str, faults: Any = ECC) -> None:
    body = health_report(node, _now(), faults).model_dump(mode="json")
    response = httpx.post(
        f"{kiban.url}/api/v1/nodes/{node}/health",
        json=body,
        headers={"Authorization": f"Bearer {kiban.token}"},
        timeout=30,
    )
    assert response.status_code == 200, response.text


def _now() -> float:
    return time.time()


def cordons(kiban: KibanServer) -> dict[str, str]:
    return {
        name: source
        for name, source in store(kiban, "SELECT name, cordon_source FROM nodes WHERE cordoned")
    }


def checkpointed(kiban: KibanServer, job_id: str) -> None:
    eventually(
        lambda: "checkpoint 3" in kiban.log_text(job_id, 0),
        timeout=60,
        what="the first attempt's third checkpoint",
    )


def finishes_elsewhere(kiban: KibanServer, job_id: str, bad: str, submitted_at: float) -> None:
    job = kiban.wait_for_state(job_id, "Succeeded")
    assert job["submittedAt"] == submitted_at  # its place in line kept
    ((failed,),) = store(kiban, "SELECT failed_attempts FROM jobs WHERE id = ?", job_id)
    assert failed == 0  # the node's fault spent none of its backoffLimit
    nodes = replica_nodes(kiban, job_id)
    assert bad in nodes[1]
    last = max(nodes)
    assert last == 2
    assert nodes[last] == {"node-0", "node-1", "node-2"} - {bad}  # the other two nodes
    log = kiban.log_text(job_id, 0) + kiban.log_text(job_id, 1)
    assert log.count("resumed from 3") == 2 and log.count("finished from 3") == 2
    for attempt in (1, 2):
        for rank in (0, 1):  # each replica of each attempt started once: none launched twice
            assert log.count(f"started attempt {attempt} rank {rank} ") == 1, log


def test_an_ecc_fault_drains_the_node_and_the_job_finishes_elsewhere_from_its_checkpoint(
    kiban: KibanServer,
) -> None:
    job_id = training(kiban)
    running = kiban.wait_for_state(job_id, "Running")
    checkpointed(kiban, job_id)
    bad = sorted(replica_nodes(kiban, job_id)[1])[0]

    report_fault(kiban, bad)

    eventually(lambda: cordons(kiban) == {bad: "remediation"}, what="the node cordoned")
    finishes_elsewhere(kiban, job_id, bad, running["submittedAt"])
    reasons = [e["reason"] for e in kiban.events(job_id)]
    assert "NodeUnhealthy" in reasons and "Requeued" in reasons
    ((action, check, rule, outcome),) = store(
        kiban, 'SELECT action, "check", rule, outcome FROM remediation_actions'
    )
    assert (action, check, rule, outcome) == ("drain", "GpuEcc", "gpu-ecc", "done")
    # The bad node gets nothing new: of three whole-node jobs, two run on the other nodes and
    # the third waits.
    sleepers = [kiban.run_job(*SLEEPER, options=["--gpus", "2"]) for _ in range(3)]
    eventually(
        lambda: sum(kiban.job(j)["state"] == "Running" for j in sleepers) == 2,
        what="two whole-node jobs running",
    )
    waiting = [j for j in sleepers if kiban.job(j)["state"] == "Pending"]
    assert len(waiting) == 1
    used = set().union(*(replica_nodes(kiban, j).get(1, set()) for j in sleepers))
    assert used == {"node-0", "node-1", "node-2"} - {bad}
    for job in sleepers:
        kiban.ok("cancel", job)


def test_the_circuit_breaker_bounds_a_burst_of_faults(start_kiban: StartKiban) -> None:
    config = {
        "nodes": [{"name": f"node-{i}", "gpus": 2} for i in range(3)],
        "health": {"circuitBreaker": {"maxNodes": 1, "windowSeconds": 3600}},
    }
    kiban = start_kiban(nodes=None, config=config)
    for i in range(3):
        report_fault(kiban, f"node-{i}")
    assert cordons(kiban) == {"node-0": "remediation"}
    outcomes = store(kiban, "SELECT node, outcome FROM remediation_actions ORDER BY id")
    assert outcomes == [
        ("node-0", "pending"),
        ("node-1", "suppressed"),
        ("node-2", "suppressed"),
    ] or outcomes == [("node-0", "done"), ("node-1", "suppressed"), ("node-2", "suppressed")]
    suppressed = store(
        kiban,
        "SELECT message FROM events WHERE object_kind = 'Node' AND reason = ?",
        "RemediationSuppressed",
    )
    assert len(suppressed) == 2
    assert all("circuit breaker open" in m for (m,) in suppressed)


def test_kill_9_of_the_control_plane_mid_drain_loses_no_job_and_launches_none_twice(
    kiban: KibanServer,
) -> None:
    job_id = training(kiban)
    running = kiban.wait_for_state(job_id, "Running")
    checkpointed(kiban, job_id)
    bad = sorted(replica_nodes(kiban, job_id)[1])[0]

    report_fault(kiban, bad)
    kiban.kill()  # SIGKILL at once: the drain may be recorded only, or half done
    kiban.start()

    eventually(lambda: cordons(kiban) == {bad: "remediation"}, what="the node cordoned")
    finishes_elsewhere(kiban, job_id, bad, running["submittedAt"])
    ((outcome,),) = store(kiban, "SELECT outcome FROM remediation_actions")
    assert outcome == "done"
    assert not kiban.replica_processes()


def test_a_fault_injected_through_the_agents_reading_seam_drains_the_node(
    start_kiban: StartKiban, tmp_path: Path
) -> None:
    readings = tmp_path / "readings"
    readings.mkdir()
    nodes = ("node-0", "node-1", "node-2")
    for name in nodes:
        (readings / f"{name}.json").write_text(node_reading(name, gpus=2).model_dump_json())
    kiban = start_kiban(
        nodes=3,
        gpus_per_node=2,
        extra_args=["--agent-readings-dir", str(readings), "--health-interval", "0.5"],
    )
    eventually(
        lambda: len(store(kiban, "SELECT node FROM node_conditions WHERE type = 'GpuEcc'")) == 3,
        what="the agent's first reports of every node",
        timeout=60,
    )
    job_id = training(kiban)
    running = kiban.wait_for_state(job_id, "Running")
    checkpointed(kiban, job_id)
    bad = sorted(replica_nodes(kiban, job_id)[1])[0]

    sick = with_gpu(node_reading(bad, gpus=2), 1, ecc_volatile_uncorrectable=1)
    (readings / f"{bad}.json").write_text(sick.model_dump_json())

    eventually(lambda: cordons(kiban) == {bad: "remediation"}, what="the node cordoned")
    finishes_elsewhere(kiban, job_id, bad, running["submittedAt"])
    ((check, reading),) = store(kiban, 'SELECT "check", reading FROM remediation_actions')
    assert check == "GpuEcc" and "GPU 1" in reading  # the agent's reading, named
    # kiban up's one agent sent its three nodes' reports together, pass after pass
    paths = {path for (path,) in store(kiban, "SELECT path FROM audit_log WHERE method = 'POST'")}
    assert "/api/v1/nodes/health" in paths
    assert not {p for p in paths if p.startswith("/api/v1/nodes/node-")}, paths
