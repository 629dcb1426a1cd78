"""Fakes for driving kiban deterministically: a manual clock, a fake executor, builders of
snapshots and of job manifests, and ``eventually`` for waiting on a condition by polling.
(Submitting straight to a platform's store: ``kiban.testing.platform_jobs``.)"""

from kiban.testing.builders import (
    ClusterBuilder,
    JobBuilder,
    QueueBuilder,
    RunningBuilder,
    cluster,
    job,
    queue,
    running,
    snapshot,
)
from kiban.testing.clock import ManualClock
from kiban.testing.fake_executor import FakeExecutor, FakeReplica
from kiban.testing.manifests import manifest, submit
from kiban.testing.waiting import TimedOut, eventually, eventually_async

__all__ = [
    "ClusterBuilder",
    "FakeExecutor",
    "FakeReplica",
    "JobBuilder",
    "ManualClock",
    "QueueBuilder",
    "RunningBuilder",
    "TimedOut",
    "cluster",
    "eventually",
    "eventually_async",
    "job",
    "manifest",
    "queue",
    "running",
    "snapshot",
    "submit",
]
