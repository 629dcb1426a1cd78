"""Fakes for driving kiban deterministically: a manual clock, a fake executor, and builders."""

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

__all__ = [
    "ClusterBuilder",
    "FakeExecutor",
    "FakeReplica",
    "JobBuilder",
    "ManualClock",
    "QueueBuilder",
    "RunningBuilder",
    "cluster",
    "job",
    "queue",
    "running",
    "snapshot",
]
