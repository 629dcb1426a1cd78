"""The scheduler end to end on the local executor: borrowing and reclaim, priority preemption
that picks the victim with the freshest checkpoint, a gang kept to one topology domain, and
replicas kept one per node.

Each test starts a real ``kiban up`` with a cluster file and runs real replica processes; the
CLI and the API are the only way in.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest
import yaml
from e2e_support import KibanServer, StartKiban, eventually, job_manifest

pytestmark = pytest.mark.e2e

SLEEP = [sys.executable, "-c", "import time; time.sleep(600)"]

# Sleeps; once the file "checkpoint-JOBNAME" appears in its working directory, it writes a
# checkpoint into $KIBAN_CHECKPOINT_DIR (the loop notices the file's time) and keeps running.
CHECKPOINTER = [
    sys.executable,
    "-c",
    "import os, pathlib, time\n"
    "done = False\n"
    "while True:\n"
    "    if not done and pathlib.Path('checkpoint-' + os.environ['KIBAN_JOB_NAME']).exists():\n"
    "        ckpt = pathlib.Path(os.environ['KIBAN_CHECKPOINT_DIR']) / 'step.ckpt'\n"
    "        ckpt.write_text('step 100')\n"
    "        print('checkpoint written', flush=True)\n"
    "        done = True\n"
    "    time.sleep(0.1)\n",
]

PRIORITIES = [
    {"name": "low", "value": 100},
    {"name": "normal", "value": 1000, "default": True},
    {"name": "high", "value": 10000, "preemptionPolicy": "PreemptLowerPriority"},
]


def node(name: str, gpus: int, **labels: str) -> dict[str, Any]:
    return {"name": name, "gpus": gpus, "cpus": 8, "memory": "8Gi", "labels": labels}


def reason_code(server: KibanServer, job_id: str) -> str | None:
    reason = server.job(job_id).get("reason")
    return reason["code"] if reason else None


def event_messages(server: KibanServer, job_id: str, reason: str) -> list[str]:
    return [e["message"] for e in server.events(job_id) if e["reason"] == reason]


def test_a_lender_reclaims_what_its_cohort_borrowed(start_kiban: StartKiban) -> None:
    server = start_kiban(
        nodes=None,
        config={
            "nodes": [node(f"n{i}", 2) for i in range(3)],
            "cohorts": [{"name": "research"}],
            "queues": [
                {"name": "vision", "cohort": "research", "quota": {"gpu": 4}},
                {"name": "speech", "cohort": "research", "quota": {"gpu": 2}},
            ],
        },
    )
    # speech runs 2 GPUs of its own, then borrows 2 of vision's idle quota.
    own = server.submit(job_manifest("own", SLEEP, gpu=2, queue="speech"), "own.yaml")
    server.wait_for_state(own, "Running")
    borrowed = server.submit(job_manifest("borrowed", SLEEP, gpu=2, queue="speech"), "b.yaml")
    server.wait_for_state(borrowed, "Running")
    submitted_at = server.job(borrowed)["submittedAt"]
    queues = {q["name"]: q for q in server.json("queues")}
    assert queues["speech"]["flavors"][0]["borrowed"] == 2
    assert queues["vision"]["flavors"][0]["lent"] == 2

    # vision, within its nominal quota, takes back one job's worth; the borrowed job goes.
    first = server.submit(job_manifest("first", SLEEP, gpu=2, queue="vision"), "v1.yaml")
    server.wait_for_state(first, "Running")  # the third node was free
    reclaim = server.submit(job_manifest("reclaim", SLEEP, gpu=2, queue="vision"), "v2.yaml")
    server.wait_for_state(reclaim, "Running")

    victim = server.wait_for_state(borrowed, "Pending")
    assert victim["preemptedBy"] == reclaim
    assert victim["submittedAt"] == submitted_at  # back in its queue, keeping its place
    (preempted,) = event_messages(server, borrowed, "Preempted")
    assert reclaim in preempted and "reclaim" in preempted
    assert server.job(own)["state"] == "Running"  # within speech's own quota: untouched
    eventually(
        lambda: reason_code(server, borrowed) == "CohortExhausted",
        what="the returned job to wait for quota its cohort no longer lends",
    )


def test_priority_preemption_takes_the_job_with_the_freshest_checkpoint(
    start_kiban: StartKiban,
) -> None:
    server = start_kiban(
        nodes=None,
        config={
            "nodes": [node("n0", 1), node("n1", 1)],
            "queues": [{"name": "default"}],
            "priorityClasses": PRIORITIES,
        },
    )
    stale = server.submit(
        job_manifest("stale", CHECKPOINTER, gpu=1, priorityClass="low"), "stale.yaml"
    )
    server.wait_for_state(stale, "Running")
    fresh = server.submit(
        job_manifest("fresh", CHECKPOINTER, gpu=1, priorityClass="low"), "fresh.yaml"
    )
    server.wait_for_state(fresh, "Running")
    # Only the job started first checkpoints (the CLI would do the same through the API):
    # since its checkpoint it has done less work than the other since its start.
    (server.workdir / "checkpoint-stale").write_text("")
    eventually(lambda: "checkpoint written" in server.log_text(stale), what="the checkpoint")
    eventually(
        lambda: server.job(stale).get("lastCheckpointAt"),
        what="the loop to notice the checkpoint file",
    )
    assert server.job(fresh).get("lastCheckpointAt") is None

    urgent = server.submit(job_manifest("urgent", SLEEP, gpu=1, priorityClass="high"), "u.yaml")
    server.wait_for_state(urgent, "Running")
    victim = server.wait_for_state(stale, "Pending")
    assert victim["preemptedBy"] == urgent
    assert server.job(fresh)["state"] == "Running"
    (preempted,) = event_messages(server, stale, "Preempted")
    assert urgent in preempted and "priority" in preempted
    described = server.ok("describe", stale)
    assert "Preempted" in described and urgent in described


def test_a_required_topology_gang_goes_whole_into_one_block(start_kiban: StartKiban) -> None:
    block = "oci.oraclecloud.com/rdma.local_block_id"
    host = "kubernetes.io/hostname"
    nodes = [node(f"a{i}", 2, **{block: "block-a", host: f"a{i}"}) for i in range(2)] + [
        node(f"b{i}", 2, **{block: "block-b", host: f"b{i}"}) for i in range(3)
    ]
    server = start_kiban(
        nodes=None,
        config={
            "nodes": nodes,
            "queues": [{"name": "default", "strategy": "BestEffortFIFO"}],
            "topology": {
                "levels": [
                    {"name": "local_block", "label": block},
                    {"name": "host", "label": host},
                ]
            },
        },
    )
    # Best fit puts a 1-GPU job on a0 (fewest GPUs left over, first by name): block a keeps 3
    # free GPUs, block b 6. A 2 x 2-GPU gang must then go whole into block b.
    filler = server.submit(job_manifest("filler", SLEEP, gpu=1), "filler.yaml")
    assert server.wait_for_state(filler, "Running")["replicas"][0]["node"] == "a0"
    required = {"level": "local_block", "mode": "required"}
    gang = server.submit(
        job_manifest("gang", SLEEP, replicas=2, gpu=2, topology=required), "gang.yaml"
    )
    running = server.wait_for_state(gang, "Running")
    assert sorted(r["node"] for r in running["replicas"]) == ["b0", "b1"]

    # Now a1 and b2 have 2 GPUs free each: room for another such gang, but not in one block.
    split = server.submit(
        job_manifest("split", SLEEP, replicas=2, gpu=2, topology=required), "split.yaml"
    )
    eventually(
        lambda: reason_code(server, split) == "InsufficientCapacity",
        what="the gang to wait for room in one block",
    )
    assert "in one local_block" in server.job(split)["reason"]["message"]
    # The same gang with a preferred topology takes the room there is, across the blocks.
    preferred = {"level": "local_block", "mode": "preferred"}
    relaxed = server.submit(
        job_manifest("relaxed", SLEEP, replicas=2, gpu=2, topology=preferred), "relaxed.yaml"
    )
    running = server.wait_for_state(relaxed, "Running")
    assert sorted(r["node"] for r in running["replicas"]) == ["a1", "b2"]
    assert server.job(split)["state"] == "Pending" and not server.job(split).get("replicas")

    # Four replicas can never fit one block (4 and 6 GPUs): refused at submission, said as such.
    path = server.workdir / "huge.yaml"
    path.write_text(
        yaml.safe_dump(job_manifest("huge", SLEEP, replicas=4, gpu=2, topology=required))
    )
    done = server.cli("submit", path)
    assert done.returncode != 0
    assert "spec.topology.level: can never start: needs the gang (8 GPUs) in one local_block" in (
        done.stderr
    )


def test_one_replica_per_node_lands_on_as_many_nodes(start_kiban: StartKiban) -> None:
    """Three 1-GPU replicas fit one 8-GPU node; with maxReplicasPerNode 1 they take three."""
    server = start_kiban(nodes=3, gpus_per_node=8)
    manifest = job_manifest("ddp", SLEEP, replicas=3, gpu=1, task={"maxReplicasPerNode": 1})
    spread = server.submit(manifest, "ddp.yaml")
    job = server.wait_for_state(spread, "Running")
    assert sorted(r["node"] for r in job["replicas"]) == ["node-0", "node-1", "node-2"]
    packed = server.submit(job_manifest("packed", SLEEP, replicas=3, gpu=1), "packed.yaml")
    job = server.wait_for_state(packed, "Running")
    assert len({r["node"] for r in job["replicas"]}) == 1  # best fit, without the limit
