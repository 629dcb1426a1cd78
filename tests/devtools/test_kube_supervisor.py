"""Background processes tracked by pid files (kiban.devtools.kube.supervisor)."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import psutil
import pytest

from kiban.devtools.kube import supervisor

SLEEPER = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"]


def test_start_writes_a_pid_file_and_stop_ends_the_process(tmp_path: Path) -> None:
    record = supervisor.start("sleeper", SLEEPER, run_dir=tmp_path / "run", log_dir=tmp_path)
    path = supervisor.pid_file(tmp_path / "run", "sleeper")
    try:
        assert supervisor.read_record(path) == record
        assert supervisor.alive(record)
        assert psutil.Process(record.pid).cmdline() == SLEEPER
    finally:
        stopped = supervisor.stop_from_pid_file(path, timeout=5)
    assert stopped == record
    assert not supervisor.alive(record)
    assert not path.exists()
    assert not psutil.pid_exists(record.pid) or (
        psutil.Process(record.pid).create_time() != record.started
    )


def test_a_reused_pid_is_never_signalled(tmp_path: Path) -> None:
    """A pid file whose start time does not match the live process is stale: left alone."""
    me = psutil.Process()
    stale = supervisor.ProcessRecord("x", me.pid, me.create_time() - 100, ["x"], "x.log")
    path = tmp_path / "x.pid"
    path.write_text(json.dumps(dataclasses.asdict(stale)))
    assert not supervisor.alive(stale)
    supervisor.stop_from_pid_file(path)
    assert me.is_running()
    assert not path.exists()


def test_check_alive_reports_the_end_of_the_log(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "print('bad flag --nope'); raise SystemExit(2)"]
    record = supervisor.start("broken", argv, run_dir=tmp_path, log_dir=tmp_path)
    psutil.Process(record.pid).wait(timeout=10)
    with pytest.raises(supervisor.ProcessExited, match="bad flag --nope"):
        supervisor.check_alive(record)
