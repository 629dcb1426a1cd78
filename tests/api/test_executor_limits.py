"""A job's description names what the executor cannot do for it while it has not ended (no
checkpoint probe, as on Kubernetes; no logs), and ``kiban describe`` shows each on a line."""

from __future__ import annotations

import dataclasses

from fastapi.testclient import TestClient

from kiban.cli import render
from kiban.executors.base import job_limits
from kiban.platform import Platform
from kiban.testing import FakeExecutor, manifest, submit

NO_PROBE = (
    "checkpoint probe: not offered by the fake executor; only checkpoints reported with "
    "kiban checkpoint count"
)


def test_an_executor_that_offers_all_a_job_counts_on_names_no_limit(
    api: TestClient, platform: Platform
) -> None:
    job = submit(api, manifest("whole"))
    assert api.get(f"/api/v1/jobs/{job['id']}").json()["executorLimits"] == []


def test_a_job_not_ended_names_the_probe_and_logs_the_executor_lacks(
    api: TestClient, platform: Platform, executor: FakeExecutor
) -> None:
    executor.offers = dataclasses.replace(executor.offers, checkpoints=None, logs=None)
    job = submit(api, manifest("blind"))
    platform.loop.run_once()
    described = api.get(f"/api/v1/jobs/{job['id']}").json()
    assert described["state"] == "Running"
    assert described["executorLimits"] == ["logs: not kept by the fake executor", NO_PROBE]

    executor.finish_all(job["id"])
    platform.loop.run_once()
    ended = api.get(f"/api/v1/jobs/{job['id']}").json()
    assert (ended["state"], ended["executorLimits"]) == ("Succeeded", [])  # no longer matters


def test_describe_shows_each_limit_on_an_executor_line(executor: FakeExecutor) -> None:
    executor.offers = dataclasses.replace(executor.offers, checkpoints=None)
    job = {"state": "Running", "tenant": "t", "executorLimits": job_limits(executor)}
    assert ("Executor", NO_PROBE) in render.waiting_lines(job, now=0.0)
