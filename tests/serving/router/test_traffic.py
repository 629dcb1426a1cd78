"""Traffic metrics: concurrency integrated over time into one-second samples."""

from __future__ import annotations

import pytest

from kiban.serving.router import TrafficMetrics

KEY = ("team", "svc")


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_concurrency_is_averaged_over_each_second() -> None:
    clock = Clock()
    metrics = TrafficMetrics(clock)
    metrics.started(KEY, "v1")  # at 100.0
    clock.t = 100.5
    metrics.started(KEY, "v1")
    clock.t = 101.0
    metrics.finished(KEY, "v1", 1.0, ok=True)
    clock.t = 101.25
    metrics.finished(KEY, "v1", 0.75, ok=True)
    samples = metrics.concurrency_samples("team", "svc", "v1", now=103.0)
    assert [s.at for s in samples] == [100.0, 101.0, 102.0]
    assert [s.concurrency for s in samples] == pytest.approx([1.5, 0.25, 0.0])
    assert [s.requests for s in samples] == [2, 0, 0]


def test_queued_requests_count_as_concurrency_until_they_end() -> None:
    clock = Clock()
    metrics = TrafficMetrics(clock)
    metrics.queued(KEY, "v1")
    clock.t = 100.5
    assert metrics.waiting("team", "svc", "v1") == 1
    metrics.dequeued(KEY, "v1", dispatched=True)  # still counted: now in flight
    clock.t = 101.0
    metrics.finished(KEY, "v1", 1.0, ok=False)
    samples = metrics.concurrency_samples("team", "svc", "v1", now=101.5)
    assert samples[0].concurrency == pytest.approx(1.0)
    assert samples[-1].concurrency == 0.0 and samples[-1].seconds == pytest.approx(0.5)
    snap = metrics.snapshot("team", "svc", now=101.5)
    assert (snap.completed, snap.errors, snap.queued, snap.in_flight) == (1, 1, 0, 0)
    assert snap.p50_ms == pytest.approx(1000.0)


def test_a_request_that_gives_up_waiting_leaves_no_concurrency() -> None:
    clock = Clock()
    metrics = TrafficMetrics(clock)
    metrics.queued(KEY, "v1")
    clock.t = 100.25
    metrics.dequeued(KEY, "v1", dispatched=False)
    samples = metrics.concurrency_samples("team", "svc", "v1", now=102.0)
    assert [s.concurrency for s in samples] == pytest.approx([0.25, 0.0])
    assert metrics.snapshot("team", "svc", now=102.0).in_flight == 0


def test_an_unknown_revision_has_no_samples() -> None:
    assert TrafficMetrics().concurrency_samples("team", "svc", "v9") == []
