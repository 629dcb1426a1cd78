"""The live loop keeps each member's decayed usage and orders a tenant's queue by it: a member
who used more waits behind a teammate who used less (fake executor, manual clock)."""

from __future__ import annotations

import pytest
from loop_support import cancel, state
from sqlalchemy import select

from kiban.platform import Platform
from kiban.store.models import Job
from kiban.store.models_accounting import MemberUsage
from kiban.testing import ManualClock, manifest
from kiban.testing.platform_jobs import submit_to_platform


def submit_as(platform: Platform, member: str, name: str, replicas: int) -> str:
    """A job submitted by ``member`` (the API records the token's member in ``submittedBy``)."""
    job_id = submit_to_platform(platform, manifest(name, replicas=replicas, gpu=2))
    with platform.sessions() as session:
        job = session.get(Job, job_id)
        assert job is not None
        job.submitted_by = member
        session.commit()
    return job_id


def run_passes(platform: Platform, clock: ManualClock, count: int = 1) -> None:
    for _ in range(count):
        clock.advance(1)
        platform.loop.run_once()


def usage_of(platform: Platform) -> dict[str, tuple[float, float]]:
    with platform.sessions() as session:
        rows = session.scalars(select(MemberUsage)).all()
        return {row.member: (row.usage, row.raw_usage) for row in rows}


def test_the_member_who_used_more_waits_behind_a_teammate(
    platform: Platform, clock: ManualClock
) -> None:
    first = submit_as(platform, "alice", "first", replicas=3)  # all 6 GPUs
    run_passes(platform, clock, 2)  # admitted, then its member's usage row starts
    assert state(platform, first) == "Running"
    clock.advance(1000)
    run_passes(platform, clock)
    used = usage_of(platform)
    assert set(used) == {"alice"}
    # 6 GPUs for 1,001 s, a week's half-life: just under 6,006 decayed, 6,006 raw.
    assert used["alice"][1] == pytest.approx(6 * 1001)
    assert used["alice"][0] == pytest.approx(6 * 1001, rel=1e-2)
    assert used["alice"][0] < used["alice"][1]

    again = submit_as(platform, "alice", "again", replicas=3)
    clock.advance(5)
    teammate = submit_as(platform, "bob", "teammate", replicas=3)  # later, but used nothing
    cancel(platform, first)
    run_passes(platform, clock, 4)
    assert state(platform, teammate) == "Running"
    assert state(platform, again) == "Pending"
