"""``kiban health sweep --wait`` on the local executor: a real allreduce (gloo, CPU) across the
idle virtual nodes under kiban's torchrun launcher, results visible through the API; and
``scripts/sweep-check.sh gloo``, the sweep step of ``scripts/gpu-check.sh``, end to end."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
from pathlib import Path

import psutil
import pytest
from e2e_support import (
    BIN_DIR,
    KibanServer,
    StartKiban,
    fresh_dir,
    processes_with_env,
    remove_fresh,
)

ROOT = Path(__file__).resolve().parents[2]
SWEEP_CHECK = ROOT / "scripts" / "sweep-check.sh"

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


@pytest.mark.timeout(400)
def test_sweep_check_measures_two_cpu_nodes_and_records_their_baseline(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    pytest.importorskip("torch.distributed")
    base = fresh_dir(tmp_path_factory, "sweep-check")
    home = base / "home"
    env = {k: v for k, v in os.environ.items() if k not in ("KIBAN_URL", "KIBAN_TOKEN")}
    env["PATH"] = f"{BIN_DIR}{os.pathsep}{os.environ.get('PATH', '')}"
    env.update({"KIBAN_SWEEP_SIZE_MB": "2", "KIBAN_SWEEP_ITERS": "3"})
    check = subprocess.Popen(
        ["bash", str(SWEEP_CHECK), "gloo", str(home)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # the script and the server it starts, killed together if stuck
    )
    try:
        output, _ = check.communicate(timeout=360)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(check.pid, signal.SIGKILL)
        output, _ = check.communicate()
        pytest.fail(f"sweep-check.sh did not finish in 360s; its output:\n{output[-6000:]}")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(check.pid, signal.SIGKILL)  # a server the script left behind
        root = str(home / "checkpoints")
        stray = processes_with_env("KIBAN_CHECKPOINT_DIR", lambda v: v.startswith(root))
        for proc in stray:
            with contextlib.suppress(psutil.Error):
                proc.kill()
    assert check.returncode == 0, f"sweep-check.sh exited {check.returncode}:\n{output[-6000:]}"
    assert output.rstrip().endswith("sweep-check: ok (gloo)"), output[-3000:]
    # what the script printed: each node's busbw above 0, the second sweep's baseline the first's
    figures = re.findall(
        r"^  (node-\d): busbw ([\d.]+) GB/s, baseline ([\d.]+) GB/s", output, re.MULTILINE
    )
    assert [n for n, _, _ in figures] == ["node-0", "node-1"] * 2, output[-3000:]
    assert all(float(busbw) > 0 for _, busbw, _ in figures)
    first = {n: busbw for n, busbw, _ in figures[:2]}
    assert {n: baseline for n, _, baseline in figures[2:]} == first
    # and what it kept: both sweeps' answers, recorded against the first's figures
    second = json.loads((home / "sweep-2.json").read_text())["results"]["nodes"]
    recorded = json.loads((home / "sweep-1.json").read_text())["results"]["nodes"]
    assert [f["baseline"] for f in second] == [f["busbw"] for f in recorded]
    assert stray == [], f"sweep-check.sh left replica processes behind: {stray}"
    remove_fresh(base)
