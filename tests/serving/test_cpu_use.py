"""The CPU meter: readings of CPU seconds, pass after pass, become utilization samples."""

from __future__ import annotations

import pytest

from kiban.serving.cpu_use import CpuMeter, CpuSample


def test_two_readings_make_a_sample_of_the_cores_used_over_those_requested() -> None:
    meter = CpuMeter()
    meter.observe("rev", {"a": 10.0, "b": 4.0}, requested_cores=2.0, now=100.0)
    assert meter.samples("rev") == []  # one reading says nothing about a rate
    # in 2 s, a used 3 s of CPU (1.5 cores) and b 1 s (0.5 cores): 75% + 25% of 2 cores
    meter.observe("rev", {"a": 13.0, "b": 5.0}, requested_cores=2.0, now=102.0)
    (sample,) = meter.samples("rev")
    assert sample == CpuSample(at=100.0, seconds=2.0, utilization=pytest.approx(1.0))


def test_a_replica_read_for_the_first_time_counts_at_the_others_mean() -> None:
    meter = CpuMeter()
    meter.observe("rev", {"a": 0.0}, requested_cores=1.0, now=0.0)
    meter.observe("rev", {"a": 0.6, "new": 7.0}, requested_cores=1.0, now=1.0)
    (sample,) = meter.samples("rev")
    assert sample.utilization == pytest.approx(1.2)  # 60% on a, and as much on the new one


def test_a_reading_that_went_down_counts_as_idle() -> None:
    meter = CpuMeter()
    meter.observe("rev", {"a": 5.0, "b": 5.0}, requested_cores=1.0, now=0.0)
    meter.observe("rev", {"a": 4.0, "b": 6.0}, requested_cores=1.0, now=1.0)
    assert meter.samples("rev")[0].utilization == pytest.approx(1.0)  # 0% + 100%


def test_no_replica_read_makes_no_sample_and_the_next_rate_spans_the_gap() -> None:
    meter = CpuMeter()
    meter.observe("rev", {"a": 0.0}, requested_cores=1.0, now=0.0)
    meter.observe("rev", {}, requested_cores=1.0, now=1.0)
    assert meter.samples("rev") == []
    meter.observe("rev", {"a": 1.0}, requested_cores=1.0, now=3.0)
    assert meter.samples("rev") == []  # a was not read in the pass before: no baseline
    meter.observe("rev", {"a": 2.0}, requested_cores=1.0, now=5.0)
    assert meter.samples("rev") == [CpuSample(3.0, 2.0, pytest.approx(0.5))]


def test_samples_older_than_the_history_are_dropped_and_revisions_are_apart() -> None:
    meter = CpuMeter(history_s=10.0)
    for second in range(31):
        meter.observe("one", {"a": second * 0.5}, requested_cores=1.0, now=float(second))
        meter.observe("two", {"a": second * 0.25}, requested_cores=1.0, now=float(second))
    kept = meter.samples("one")
    assert [s.at for s in kept] == [float(s) for s in range(19, 30)]
    assert [s.utilization for s in kept] == pytest.approx([0.5] * len(kept))
    assert [s.utilization for s in meter.samples("two")][-1] == pytest.approx(0.25)
    meter.forget("one")
    assert meter.samples("one") == [] and meter.samples("two")


def test_a_request_of_no_cpu_is_refused() -> None:
    with pytest.raises(ValueError, match="requested_cores"):
        CpuMeter().observe("rev", {"a": 1.0}, requested_cores=0.0, now=0.0)


def test_readings_closer_than_the_interval_wait_for_the_next() -> None:
    """CPU time comes in 10 ms ticks: a rate over a few milliseconds would be mostly noise."""
    meter = CpuMeter(read_every_s=1.0)
    assert meter.due("rev", 0.0)
    meter.observe("rev", {"a": 0.0}, requested_cores=1.0, now=0.0)
    assert not meter.due("rev", 0.5)
    meter.observe("rev", {"a": 0.01}, requested_cores=1.0, now=0.001)  # too soon: ignored
    assert meter.samples("rev") == []
    assert meter.due("rev", 1.0)
    meter.observe("rev", {"a": 0.25}, requested_cores=1.0, now=1.0)
    assert meter.samples("rev") == [CpuSample(0.0, 1.0, pytest.approx(0.25))]
