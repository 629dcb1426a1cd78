"""Fakes for driving kiban deterministically: a manual clock and a fake executor."""

from kiban.testing.clock import ManualClock
from kiban.testing.fake_executor import FakeExecutor, FakeReplica

__all__ = ["FakeExecutor", "FakeReplica", "ManualClock"]
