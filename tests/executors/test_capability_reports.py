"""What an executor does not declare is not looked for, and what users count on that it lacks
is said: an executor without a checkpoint probe is reported once per store."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from sqlalchemy import select

from kiban.executors.base import NO_LOGS, NodeInfo, checkpoint_probe, log_source
from kiban.platform import NO_CHECKPOINT_DETECTION, build_platform
from kiban.store.models import Event
from kiban.testing import FakeExecutor

NODES = [NodeInfo("node-0", 2, 8000, 32 << 30)]


def no_probe() -> FakeExecutor:
    executor = FakeExecutor(NODES)
    executor.offers = replace(executor.offers, checkpoints=None)
    return executor


def reports(home: Path, executor: FakeExecutor) -> list[tuple[str, str, str, str]]:
    platform = build_platform(home=home, db_url=None, executor=executor)
    try:
        with platform.sessions() as session:
            rows = session.scalars(select(Event).where(Event.reason == NO_CHECKPOINT_DETECTION))
            return [(e.object_kind, e.object_name, e.type, e.message) for e in rows]
    finally:
        platform.close()


def test_no_checkpoint_probe_is_reported_once_per_store(tmp_path: Path) -> None:
    first = reports(tmp_path / "home", no_probe())
    assert first == [
        (
            "Executor",
            "fake",
            "Warning",
            "checkpoint detection unavailable on fake: only checkpoints reported with kiban "
            "checkpoint count",
        )
    ]
    assert reports(tmp_path / "home", no_probe()) == first  # a restart says it no more


def test_an_executor_with_a_checkpoint_probe_reports_nothing(tmp_path: Path) -> None:
    executor = FakeExecutor(NODES)
    assert checkpoint_probe(executor) is executor
    assert reports(tmp_path / "home", executor) == []


def test_an_executor_without_logs_shows_empty_ones() -> None:
    executor = FakeExecutor(NODES)
    executor.offers = replace(executor.offers, logs=None)
    logs = log_source(executor)
    assert logs is NO_LOGS
    assert logs.read_log("j", 0, 5, 100) == (b"", 5)
    assert logs.log_start("j", 0, tail_lines=3, since=None) == 0
    assert logs.log_start("j", 0, tail_lines=None, since=1.0) is None  # times not known
    assert logs.follow_log("j", 0, 0) is None and logs.log_times("j", 0, 0, 1) is None
