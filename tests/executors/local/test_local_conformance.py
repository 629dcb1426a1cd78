"""The local executor passes the executor conformance suite: real processes on this machine."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kiban.executors.base import LaunchRequest, NodeInfo
from kiban.executors.local import LocalExecutor
from kiban.testing.conformance import GREETING, ConformanceTarget, ExecutorConformance, Work


class LocalTarget:
    """The local executor in a home of its own; each replica is a Python process."""

    patience_s = 30.0
    prints = True
    lists_attempts = False  # a replica's process group ends with its stop: none is listed

    def __init__(self, home: Path) -> None:
        self.local = LocalExecutor(home, [NodeInfo("node-0", 0, 4000, 8 << 30)])
        self.executor = self.local

    def task(self, work: Work) -> dict[str, Any]:
        then = "time.sleep(600)" if work.exit_code is None else f"sys.exit({work.exit_code})"
        script = f"import sys, time\nprint({GREETING!r}, flush=True)\n{then}\n"
        return {"command": ["python", "-c", script]}

    def started(self, request: LaunchRequest, work: Work) -> None:
        pass  # a process runs by itself

    def write_checkpoint(self, job_id: str) -> float:
        path = Path(self.local.checkpoint_dir(job_id)) / "step-1.pt"
        path.write_bytes(b"weights")
        return path.stat().st_mtime


class TestLocalExecutor(ExecutorConformance):
    @pytest.fixture
    def target(self, tmp_path: Path) -> Iterator[ConformanceTarget]:
        target = LocalTarget(tmp_path / "home")
        yield target
        target.local.close()
