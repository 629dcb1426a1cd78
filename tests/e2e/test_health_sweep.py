"""``kiban health sweep --wait`` on the local executor: a real allreduce (gloo, CPU) across the
idle virtual nodes under kiban's torchrun launcher, results visible through the API."""

from __future__ import annotations

import json

import pytest
from e2e_support import KibanServer, StartKiban

pytestmark = pytest.mark.e2e


def test_a_sweep_measures_the_idle_nodes_and_skips_the_busy_one(
    start_kiban: StartKiban,
) -> None:
    pytest.importorskip("torch.distributed")
    server: KibanServer = start_kiban(nodes=3, gpus_per_node=1)
    busy = server.run_job("sleep", "600", options=["--gpus", "1"])
    server.wait_for_state(busy, "Running")
    done = server.cli(
        "health", "sweep", "--wait", "--size-mb", "1", "--iters", "3", "-o", "json", timeout=300
    )
    assert done.returncode == 0, f"stdout: {done.stdout}\nstderr: {done.stderr}"
    answer = json.loads(done.stdout)
    (job_id,) = answer["jobs"]
    (block,) = answer["blocks"]
    assert len(block) == 2
    ((skipped),) = answer["skipped"]
    assert skipped["why"] == "busy" and skipped["block"] == ["node-0"]
    assert server.client.job(job_id)["state"] == "Succeeded"

    results = server.client.health_sweeps()
    (measured,) = results["blocks"]
    assert (measured["job"], sorted(measured["nodes"])) == (job_id, sorted(block))
    assert measured["busbw"] > 0
    assert measured["baseline"] == measured["busbw"]  # the first sweep sets the baseline
    assert measured["degraded"] is False
    assert sorted(n["name"] for n in results["nodes"]) == sorted(block)
