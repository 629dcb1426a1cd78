"""Fakes for driving kiban deterministically: a manual clock, a fake executor, and builders."""

from kiban.testing.builders import (
    ClusterBuilder,
    JobBuilder,
    QueueBuilder,
    cluster,
    job,
    queue,
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
    "cluster",
    "job",
    "queue",
    "snapshot",
]
