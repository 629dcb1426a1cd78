"""Forecasts beside the loop: at once without a worker, in the background with one, newest
snapshot first, and a failure does not stop the next forecast."""

from __future__ import annotations

import threading

import pytest

from kiban.control import forecaster as forecaster_module
from kiban.control.forecaster import Forecaster
from kiban.scheduler.policy import DEFAULT_POLICY, Policy
from kiban.scheduler.snapshot import Snapshot
from kiban.testing import cluster, eventually, job, running, snapshot


def waiting_behind(end: float, waiting: str = "w") -> Snapshot:
    """One 8-GPU node busy until ``end``; ``waiting`` needs all of it."""
    return snapshot(
        nodes=cluster().nodes(1, gpus=8),
        running=[running("r").on("node-0", gpus=8).started(0).max_runtime(end)],
        pending=[job(waiting).replicas(1, gpu=8)],
        now=10,
    )


def test_without_a_worker_the_forecast_runs_at_once() -> None:
    f = Forecaster()
    f.submit(waiting_behind(100), DEFAULT_POLICY)
    assert f.estimates() == {"w": 100.0}


def test_with_a_worker_the_newest_snapshot_is_forecast(monkeypatch: pytest.MonkeyPatch) -> None:
    """While one forecast runs, two more snapshots arrive: only the newer one is forecast."""
    started = threading.Event()
    release = threading.Event()
    seen: list[float] = []
    real = forecaster_module.forecast

    def slow(
        snap: Snapshot, policy: Policy, max_cycles: int, estimated: set[str]
    ) -> dict[str, float | None]:
        seen.append(snap.running[0].max_runtime or 0)
        started.set()
        release.wait(10)
        return real(snap, policy, max_cycles=max_cycles, estimated=estimated)

    monkeypatch.setattr(forecaster_module, "forecast", slow)
    f = Forecaster()
    f.start()
    try:
        f.submit(waiting_behind(100, "first"), DEFAULT_POLICY)
        assert started.wait(10)
        f.submit(waiting_behind(200, "second"), DEFAULT_POLICY)
        f.submit(waiting_behind(300, "third"), DEFAULT_POLICY)
        release.set()
        eventually(lambda: "third" in f.estimates(), what="the third snapshot's forecast")
    finally:
        f.stop()
    assert seen == [100, 300]
    assert f.estimates() == {"third": 300.0}


def test_a_failed_forecast_does_not_stop_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    real = forecaster_module.forecast
    calls = 0

    def flaky(
        snap: Snapshot, policy: Policy, max_cycles: int, estimated: set[str]
    ) -> dict[str, float | None]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("boom")
        return real(snap, policy, max_cycles=max_cycles, estimated=estimated)

    monkeypatch.setattr(forecaster_module, "forecast", flaky)
    f = Forecaster()
    f.start()
    try:
        f.submit(waiting_behind(100), DEFAULT_POLICY)
        eventually(lambda: calls == 1, what="the first (failing) forecast")
        f.submit(waiting_behind(150), DEFAULT_POLICY)
        eventually(lambda: f.estimates() == {"w": 150.0}, what="the next forecast")
    finally:
        f.stop()
