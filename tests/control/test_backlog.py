"""A long backlog taking submissions: the control loop's work follows the new jobs, not the
backlog (issue 21). Counts of work are asserted, not times: the machine may be busy."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from loop_support import ADMIN, get
from sqlalchemy import select

from kiban.api.app import create_app
from kiban.bench.sustained import backlog_job, prefill_backlog
from kiban.control.loop_settings import LoopSettings
from kiban.platform import Platform
from kiban.scheduler.reasons import SCHEDULING_WINDOW
from kiban.services import nodes
from kiban.stats import percentile
from kiban.store.models import Job
from kiban.store.models_nodes import Node
from kiban.testing import ManualClock, eventually, manifest
from kiban.testing import submit as submit_through_api

BACKLOG = 20_000
STEPS = 20  # of the script: 10 submissions, then 50 ms on the clock (200 submissions/s)
PER_STEP = 10


def cordon_every_node(platform: Platform) -> None:
    with platform.sessions() as session:
        for node in session.scalars(select(Node)).all():
            nodes.cordon(session, ADMIN, node.name, platform.clock.now())
        session.commit()


@pytest.fixture
def loop_settings() -> LoopSettings:
    """No resync during a test: every pass counted was asked for."""
    return LoopSettings(resync_s=3600)


@pytest.fixture
def backlogged(platform: Platform, clock: ManualClock) -> Iterator[TestClient]:
    """Every node cordoned, ``BACKLOG`` jobs pending in the default queue, one pass run, the
    loop on its thread (no resync during a test: every pass counted was asked for)."""
    cordon_every_node(platform)
    prefill_backlog(platform.engine.url.render_as_string(hide_password=False), BACKLOG, clock.now())
    clock.advance(1)
    platform.loop.run_once()
    token = (platform.home / "token").read_text().strip()
    with TestClient(create_app(platform), headers={"Authorization": f"Bearer {token}"}) as api:
        platform.loop.start()
        yield api


def submit(api: TestClient, document: dict[str, Any]) -> tuple[str, float]:
    """Submit through the API; the job's id and how long the call took (its latency)."""
    began = time.perf_counter()
    job = submit_through_api(api, document)
    return job["id"], time.perf_counter() - began


def judged(platform: Platform, job_id: str, timeout_s: float = 60.0) -> str:
    """The job's reason code once a pass has judged it (polled against a deadline)."""
    return eventually(
        lambda: get(platform, job_id).reason_code,
        what=f"a pass to judge job {job_id}",
        timeout=timeout_s,
    )


def test_a_pass_over_a_long_backlog_reads_its_window_and_reuses_what_it_made(
    platform: Platform, clock: ManualClock
) -> None:
    cordon_every_node(platform)
    prefill_backlog(platform.engine.url.render_as_string(hide_password=False), BACKLOG, clock.now())
    counts = platform.loop.counts
    platform.loop.run_once()
    first = (counts.pending_read, counts.views_made, counts.waits_written)
    assert first == (SCHEDULING_WINDOW, SCHEDULING_WINDOW, SCHEDULING_WINDOW)

    clock.advance(1)
    platform.loop.run_once()  # nothing changed: the same rows, no view made, nothing written
    again = (counts.pending_read, counts.views_made, counts.waits_written)
    assert again == (2 * SCHEDULING_WINDOW, SCHEDULING_WINDOW, SCHEDULING_WINDOW)
    assert counts.most_pending_read == SCHEDULING_WINDOW


def test_submissions_behind_a_full_window_ask_for_no_pass(
    platform: Platform, clock: ManualClock, backlogged: TestClient
) -> None:
    counts = platform.loop.counts
    passes, read, judged_before = counts.scheduling_passes, counts.pending_read, counts.judged
    latencies = []
    ids = []
    for _ in range(STEPS):  # a scripted rate in the loop's time: 200 submissions a second
        for _ in range(PER_STEP):
            job_id, latency = submit(backlogged, backlog_job())
            ids.append(job_id)
            latencies.append(latency)
        clock.advance(0.05)

    assert counts.stored_behind == STEPS * PER_STEP, counts
    assert counts.scheduling_passes == passes, counts  # none asked for: all behind the window
    assert (counts.pending_read, counts.judged) == (read, judged_before), counts
    p99 = percentile(latencies, 99)
    assert p99 < 5.0, sorted(latencies)[-5:]  # generous: a bound for a busy machine, not a speed
    # The jobs are stored and shown waiting in the backlog, as before.
    shown = backlogged.get(f"/api/v1/jobs/{ids[-1]}").json()
    assert (shown["state"], shown["reason"]["code"]) == ("Pending", "QueueBacklog")

    # A job that stands ahead of the window's end asks for a pass, which judges it.
    urgent, _ = submit(backlogged, manifest("urgent", priorityClass="high"))
    clock.advance(1)  # the loop spaces asked-for passes by its clock
    assert judged(platform, urgent) == "NoNodeFits"
    assert counts.scheduling_passes > passes
    assert counts.most_pending_read <= SCHEDULING_WINDOW


def test_a_cancel_in_the_window_brings_the_next_job_in(
    platform: Platform, clock: ManualClock, backlogged: TestClient
) -> None:
    with platform.sessions() as session:
        order = list(
            session.scalars(
                select(Job.id)
                .where(Job.state == "Pending")
                .order_by(Job.priority.desc(), Job.submitted_at, Job.id)
                .limit(SCHEDULING_WINDOW + 1)
            )
        )
    head, first_behind = order[0], order[-1]
    assert get(platform, first_behind).reason_code is None  # behind the window: not judged

    assert backlogged.post(f"/api/v1/jobs/{head}/cancel").status_code == 200
    clock.advance(1)  # the loop spaces asked-for passes by its clock
    # The default queue is BestEffortFIFO: the job is judged on its own (its node cordoned).
    assert judged(platform, first_behind) == "NoNodeFits"
    assert get(platform, head).state == "Cancelled"
