"""The fake executor passes the executor conformance suite (the unit tier's stand-in must
behave as the real executors do)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kiban.executors.base import LaunchRequest, NodeInfo
from kiban.testing import FakeExecutor
from kiban.testing.conformance import GREETING, ConformanceTarget, ExecutorConformance, Work

NODES = [NodeInfo("node-0", 2, 8000, 32 << 30), NodeInfo("node-1", 2, 8000, 32 << 30)]


class FakeTarget:
    """The fake executor; its replicas print and end as each case's work says, at launch."""

    patience_s = 5.0
    prints = True
    lists_attempts = True

    def __init__(self, checkpoints: Path) -> None:
        self.fake = FakeExecutor(NODES)
        self.fake.checkpoints_root = str(checkpoints)
        self.executor = self.fake

    def task(self, work: Work) -> dict[str, Any]:
        return {"command": ["train"]}

    def started(self, request: LaunchRequest, work: Work) -> None:
        for placement in request.placements:
            self.fake.write_log(request.job_id, placement.rank, f"{GREETING}\n".encode(), 0.0)
        if work.exit_code is not None:
            self.fake.finish_all(request.job_id, work.exit_code)

    def write_checkpoint(self, job_id: str) -> float:
        directory = Path(self.fake.checkpoint_dir(job_id))
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / "step-1.pt"
        path.write_bytes(b"weights")
        return path.stat().st_mtime


class TestFakeExecutor(ExecutorConformance):
    @pytest.fixture
    def target(self, tmp_path: Path) -> ConformanceTarget:
        return FakeTarget(tmp_path / "checkpoints")
