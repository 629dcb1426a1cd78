"""The control loop's snapshot of the store: its running jobs grouped for the core."""

from __future__ import annotations

from loop_support import get

from kiban.control.snapshot_builder import SpecCache, build_snapshot
from kiban.platform import Platform
from kiban.store.models import Job
from kiban.testing import manifest
from kiban.testing.platform_jobs import submit_to_platform


def test_the_snapshot_hands_the_core_its_running_jobs_by_queue_and_those_stopping(
    platform: Platform,
) -> None:
    ids = [submit_to_platform(platform, manifest(f"job-{i}", gpu=1)) for i in range(3)]
    platform.loop.run_once()
    assert all(get(platform, job_id).state == "Running" for job_id in ids)
    with platform.sessions() as session:  # job-1 is being stopped for another job
        job = session.get(Job, ids[1])
        assert job is not None
        job.state, job.preempted_by = "Stopping", "urgent-job"
        session.commit()

    with platform.sessions() as session:
        snapshot = build_snapshot(session, SpecCache(), platform.clock.now())
    index = snapshot.running_index
    assert index is not None
    assert {q: sorted(j.id for j in jobs) for q, jobs in index.by_queue.items()} == {
        "default": sorted(ids)
    }
    assert [(j.id, j.preempted_by) for j in index.stopping] == [(ids[1], "urgent-job")]
    assert sorted(j.id for j in snapshot.running) == sorted(ids)
