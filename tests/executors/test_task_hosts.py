"""The hosts by task that Volcano's svc plugin gives (``spec.hostsFiles``), in its formats."""

from __future__ import annotations

from kiban.domain.jobspec import JobSpec
from kiban.executors.task_hosts import hosts_data, hosts_env, hosts_files


def spec() -> JobSpec:
    return JobSpec.model_validate(
        {
            "hostsFiles": True,
            "tasks": [
                {"name": "ps", "command": ["true"]},
                {"name": "data-worker", "replicas": 3, "command": ["true"]},
            ],
        }
    )


def test_each_task_has_a_host_file_and_its_variables_as_volcano_writes_them() -> None:
    data = hosts_data(spec(), lambda task, i: f"job-{task}-{i}.job")
    assert data == {
        "ps.host": "job-ps-0.job",
        "VC_PS_HOSTS": "job-ps-0.job",
        "VC_PS_NUM": "1",
        # a '-' in the task's name is '_' (svc.go), the variables' names upper-cased;
        # one host a line, no newline at the end
        "data_worker.host": "job-data-worker-0.job\njob-data-worker-1.job\njob-data-worker-2.job",
        "VC_DATA_WORKER_HOSTS": "job-data-worker-0.job,job-data-worker-1.job,job-data-worker-2.job",
        "VC_DATA_WORKER_NUM": "3",
    }
    assert set(hosts_env(data)) == {
        "VC_PS_HOSTS",
        "VC_PS_NUM",
        "VC_DATA_WORKER_HOSTS",
        "VC_DATA_WORKER_NUM",
    }
    assert set(hosts_files(data)) == {"ps.host", "data_worker.host"}
