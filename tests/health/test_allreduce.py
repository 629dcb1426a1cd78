"""The allreduce sweep program: nccl-tests' bandwidth formulas, and a real two-rank run on
gloo (CPU) whose result line parses."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from kiban.health.allreduce import (
    RESULT_PREFIX,
    RankResult,
    SweepResult,
    algbw,
    busbw,
    parse_result_line,
    rank_result,
)


@pytest.mark.parametrize(
    ("ranks", "factor"),
    [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75), (16, 1.875)],  # 2(n-1)/n
)
def test_busbw_is_algbw_times_2_n_minus_1_over_n(ranks: int, factor: float) -> None:
    assert busbw(10e9, ranks) == pytest.approx(10e9 * factor)


def test_algbw_is_bytes_over_seconds() -> None:
    assert algbw(1_000_000_000, 0.5) == pytest.approx(2e9)
    with pytest.raises(ValueError, match="seconds"):
        algbw(1, 0.0)
    with pytest.raises(ValueError, match="ranks"):
        busbw(1.0, 0)


def test_a_rank_result_in_gigabytes_per_second() -> None:
    result = rank_result(rank=1, node="n", size_bytes=400_000_000, seconds=0.01, ranks=4)
    assert (result.rank, result.node, result.seconds) == (1, "n", 0.01)
    assert result.algbw_gbps == pytest.approx(40.0)
    assert result.busbw_gbps == pytest.approx(60.0)


def test_the_result_line_is_the_last_marked_line() -> None:
    result = SweepResult("gloo", 2, 8, 3, (RankResult(0, "a", 1.0, 2.0, 2.0),))
    output = f"noise\n{RESULT_PREFIX}{{broken\n{RESULT_PREFIX}{result.to_json()}\ntrailer\n"
    assert parse_result_line(output) == result
    assert parse_result_line("nothing here\n") is None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_two_ranks_on_gloo_report_every_rank(tmp_path: Path) -> None:
    pytest.importorskip("torch.distributed")
    port = free_port()
    out = tmp_path / "result.json"
    procs = []
    for rank in range(2):
        env = {
            **os.environ,
            "RANK": str(rank),
            "WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "KIBAN_NODE": f"node-{rank}",
            "CUDA_VISIBLE_DEVICES": "",
        }
        command = [sys.executable, "-m", "kiban.health.allreduce", "--size-mb", "1"]
        command += ["--iters", "3", "--out", str(out)]
        procs.append(
            subprocess.Popen(
                command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        )
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    result = parse_result_line(outputs[0])
    assert result is not None
    assert SweepResult.from_json(out.read_text()) == result
    assert (result.backend, result.world_size, result.size_bytes) == ("gloo", 2, 1_000_000)
    assert [(r.rank, r.node) for r in result.ranks] == [(0, "node-0"), (1, "node-1")]
    for r in result.ranks:
        assert r.seconds > 0
        assert r.algbw_gbps == pytest.approx(1_000_000 / r.seconds / 1e9)
        assert r.busbw_gbps == pytest.approx(r.algbw_gbps)  # 2(n-1)/n = 1 for two ranks
    assert parse_result_line(outputs[1]) is None  # only rank 0 reports
