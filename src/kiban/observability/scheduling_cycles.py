"""The scheduling cycle's duration, observed by the control loop around each pass it schedules.

A histogram in no registry: the control plane's collector (``cluster_metrics``) yields it with
the metrics it reads from the store, so one loop (and a test's) keeps one histogram of its own.
"""

from __future__ import annotations

from prometheus_client import Histogram

CYCLE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""From a millisecond (an idle cluster) to ten seconds (far past the 1 s a cycle should take)."""

CYCLE_METRIC = "kiban_scheduling_cycle_seconds"


def cycle_histogram() -> Histogram:
    """A new histogram of scheduling cycle durations (``with histogram.time(): ...``)."""
    return Histogram(
        CYCLE_METRIC,
        "Duration of the control loop's scheduling passes (snapshot, decide, apply).",
        buckets=CYCLE_BUCKETS,
        registry=None,
    )
