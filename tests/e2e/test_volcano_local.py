"""A Volcano Job file submitted unchanged through the CLI runs on the local executor."""

from __future__ import annotations

import pytest
from e2e_support import KibanServer

pytestmark = pytest.mark.e2e

# Written as for a Volcano cluster: an image, the pytorch plugin, a claim at /data. Each
# replica prints the variables a distributed PyTorch script reads.
PRINT_ENV = (
    "import os; print(' '.join(f'{k}={os.environ.get(k)}' for k in "
    "('MASTER_ADDR', 'MASTER_PORT', 'WORLD_SIZE', 'RANK', 'VC_TASK_INDEX', "
    "'CUDA_VISIBLE_DEVICES', 'EPOCHS', 'VC_WORKER_NUM', 'VC_WORKER_HOSTS', 'VC_MASTER_HOSTS')), "
    "'WORKER_FILE=' + open(os.environ['KIBAN_HOSTS_DIR'] + '/worker.host').read().replace("
    "chr(10), '+'))"
)
VOLCANO_JOB = f"""
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: ddp
spec:
  schedulerName: volcano
  minAvailable: 3
  plugins:
    pytorch: ["--master=master", "--worker=worker", "--port=23456"]
    env: []
    svc: []
  volumes:
    - mountPath: /data
      volumeClaimName: datasets
  tasks:
    - name: worker
      replicas: 2
      template:
        spec:
          restartPolicy: OnFailure
          containers:
            - name: worker
              image: registry.example/ddp:1
              command: ["python", "-c", "{PRINT_ENV}"]
              env: [{{name: EPOCHS, value: "2"}}]
              resources:
                limits: {{nvidia.com/gpu: 2}}
    - name: master
      replicas: 1
      template:
        spec:
          restartPolicy: OnFailure
          containers:
            - name: master
              image: registry.example/ddp:1
              command: ["python", "-c", "{PRINT_ENV}"]
              env: [{{name: EPOCHS, value: "2"}}]
              resources:
                limits: {{nvidia.com/gpu: 2}}
"""


def parse(line: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in line.split())


def test_volcano_pytorch_job_runs_locally_with_the_plugin_environment(
    kiban: KibanServer,
) -> None:
    path = kiban.workdir / "volcano-job.yaml"
    path.write_text(VOLCANO_JOB)
    done = kiban.cli("submit", path)
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    # The submitter is told what the local executor ignores, by field.
    warning = next(line for line in done.stderr.splitlines() if "local executor" in line)
    assert warning.startswith("warning: ")
    for field in (
        "spec.tasks[1].template.spec.containers[0].image",
        "spec.tasks[0].template.spec.volumes",
        "spec.plugins.pytorch",
    ):
        assert field in warning, warning
    kiban.wait_for_state(job_id, "Succeeded")
    envs = [parse(kiban.log_text(job_id, rank).strip().splitlines()[-1]) for rank in range(3)]
    # Rank 0 is the master's replica (listed second in the file); workers are 1 and 2.
    assert [e["RANK"] for e in envs] == ["0", "1", "2"]
    assert [e["VC_TASK_INDEX"] for e in envs] == ["0", "0", "1"]
    assert {e["WORLD_SIZE"] for e in envs} == {"3"}
    assert {e["MASTER_ADDR"] for e in envs} == {"127.0.0.1"}
    assert len({e["MASTER_PORT"] for e in envs}) == 1  # one free port, shared
    assert {e["EPOCHS"] for e in envs} == {"2"}
    assert all(len(e["CUDA_VISIBLE_DEVICES"].split(",")) == 2 for e in envs)
    # the svc plugin: each task's hosts (the replicas' names), as variables and files
    name = kiban.json("describe", job_id)["name"]
    workers = [f"{name}-worker-0", f"{name}-worker-1"]
    assert {e["VC_WORKER_NUM"] for e in envs} == {"2"}
    assert {e["VC_WORKER_HOSTS"] for e in envs} == {",".join(workers)}
    assert {e["VC_MASTER_HOSTS"] for e in envs} == {f"{name}-master-0"}
    assert {e["WORKER_FILE"] for e in envs} == {"+".join(workers)}
    events = kiban.events(job_id)
    warned = [e for e in events if e["reason"] == "SubmittedWithWarnings"]
    assert warned and warned[0]["type"] == "Warning"
    assert "spec.tasks[1].template.spec.containers[0].image" in warned[0]["message"]
