"""Traffic metrics: concurrency integrated over time into one-second samples."""

from __future__ import annotations

import pytest

from kiban.serving.router.traffic import TrafficMetrics

KEY = ("team", "svc")


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_concurrency_is_averaged_over_each_second() -> None:
    clock = Clock()
    metrics = TrafficMetrics(clock)
    v1 = metrics.counter(KEY, "v1")
    v1.started()  # at 100.0
    clock.t = 100.5
    v1.started()
    clock.t = 101.0
    v1.finished(1.0, ok=True)
    clock.t = 101.25
    v1.finished(0.75, ok=True)
    samples = metrics.concurrency_samples("team", "svc", "v1", now=103.0)
    assert [s.at for s in samples] == [100.0, 101.0, 102.0]
    assert [s.concurrency for s in samples] == pytest.approx([1.5, 0.25, 0.0])
    assert [s.requests for s in samples] == [2, 0, 0]


def test_queued_requests_count_as_concurrency_until_they_end() -> None:
    clock = Clock()
    metrics = TrafficMetrics(clock)
    v1 = metrics.counter(KEY, "v1")
    v1.was_queued()
    clock.t = 100.5
    assert metrics.waiting("team", "svc", "v1") == 1
    v1.dequeued(dispatched=True)  # still counted: now in flight
    clock.t = 101.0
    v1.finished(1.0, ok=False)
    samples = metrics.concurrency_samples("team", "svc", "v1", now=101.5)
    assert samples[0].concurrency == pytest.approx(1.0)
    assert samples[-1].concurrency == 0.0 and samples[-1].seconds == pytest.approx(0.5)
    snap = metrics.snapshot("team", "svc", now=101.5)
    assert (snap.completed, snap.errors, snap.queued, snap.in_flight) == (1, 1, 0, 0)
    assert snap.p50_ms == pytest.approx(1000.0)


def test_a_request_that_gives_up_waiting_leaves_no_concurrency() -> None:
    clock = Clock()
    metrics = TrafficMetrics(clock)
    v1 = metrics.counter(KEY, "v1")
    v1.was_queued()
    clock.t = 100.25
    v1.dequeued(dispatched=False)
    samples = metrics.concurrency_samples("team", "svc", "v1", now=102.0)
    assert [s.concurrency for s in samples] == pytest.approx([0.25, 0.0])
    assert metrics.snapshot("team", "svc", now=102.0).in_flight == 0


def test_a_long_quiet_spell_is_zero_filled_and_bounded() -> None:
    clock = Clock()
    metrics = TrafficMetrics(clock)
    v1 = metrics.counter(KEY, "v1")
    v1.started()
    clock.t = 400.5
    v1.finished(300.5, ok=True)
    samples = metrics.concurrency_samples("team", "svc", "v1", now=401.0)
    assert len(samples) <= 120
    assert all(s.concurrency == pytest.approx(1.0) for s in samples[:-1])
    assert samples[-1].concurrency == pytest.approx(0.5)


def test_an_unknown_revision_has_no_samples() -> None:
    assert TrafficMetrics().concurrency_samples("team", "svc", "v9") == []
