"""The program an allreduce sweep job runs: time ``all_reduce`` of one tensor over every rank
and report each rank's bandwidth the way nccl-tests does.

``python -m kiban.health.allreduce --size-mb N --iters K --out FILE``, one process per rank
(under kiban's torchrun launcher, which sets ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and
``MASTER_PORT``): NCCL on GPUs, gloo on CPUs. Rank 0 gathers every rank's figures, writes them
as JSON to ``--out`` and prints them as the last line of its output after ``RESULT_PREFIX``.

The figures follow nccl-tests' PERFORMANCE.md
(https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md): for a tensor of ``S``
bytes reduced in ``t`` seconds, ``algbw = S / t``, and for all_reduce
``busbw = algbw * 2 (n - 1) / n`` over ``n`` ranks, the bandwidth each link must carry, which
can be compared with the hardware's peak whatever the number of ranks.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

RESULT_PREFIX = "KIBAN_ALLREDUCE_RESULT "
"""What the last line of rank 0's output starts with; JSON follows."""


def algbw(size_bytes: int, seconds: float) -> float:
    """Algorithm bandwidth in bytes per second: the tensor's size over one all_reduce's time."""
    if seconds <= 0:
        raise ValueError(f"seconds: must be more than 0, not {seconds!r}")
    return size_bytes / seconds


def busbw(algbw_bytes_per_s: float, ranks: int) -> float:
    """Bus bandwidth of all_reduce over ``ranks`` ranks: ``algbw * 2 (n - 1) / n``."""
    if ranks < 1:
        raise ValueError(f"ranks: must be at least 1, not {ranks!r}")
    return algbw_bytes_per_s * 2 * (ranks - 1) / ranks


@dataclass(frozen=True, slots=True)
class RankResult:
    """One rank's figures: where it ran, how long one all_reduce took, its bandwidths (GB/s,
    10^9 bytes per second as nccl-tests prints them)."""

    rank: int
    node: str
    seconds: float
    algbw_gbps: float
    busbw_gbps: float


@dataclass(frozen=True, slots=True)
class SweepResult:
    """What a sweep job reports: the run's shape and each rank's figures."""

    backend: str
    world_size: int
    size_bytes: int
    iters: int
    ranks: tuple[RankResult, ...]

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @staticmethod
    def from_json(text: str) -> SweepResult:
        data: dict[str, Any] = json.loads(text)
        return SweepResult(
            backend=str(data["backend"]),
            world_size=int(data["world_size"]),
            size_bytes=int(data["size_bytes"]),
            iters=int(data["iters"]),
            ranks=tuple(RankResult(**r) for r in data["ranks"]),
        )


def parse_result_line(output: str) -> SweepResult | None:
    """The result in a rank 0 output (its last line that starts with ``RESULT_PREFIX``)."""
    for line in reversed(output.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return SweepResult.from_json(line[len(RESULT_PREFIX) :])
    return None


def rank_result(rank: int, node: str, size_bytes: int, seconds: float, ranks: int) -> RankResult:
    """A rank's figures from the mean time of one all_reduce."""
    alg = algbw(size_bytes, seconds)
    return RankResult(rank, node, seconds, alg / 1e9, busbw(alg, ranks) / 1e9)


def measure(size_mb: float, iters: int, warmup: int = 2) -> SweepResult:
    """Join the process group from the environment, time ``iters`` all_reduces (after
    ``warmup`` untimed ones) and gather every rank's figures (on every rank)."""
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    backend = "nccl" if cuda else "gloo"
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend=backend)
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        elements = max(1, int(size_mb * 1_000_000) // 4)
        device = torch.device("cuda") if cuda else torch.device("cpu")
        tensor = torch.ones(elements, dtype=torch.float32, device=device)
        size_bytes = elements * 4

        def sync() -> None:
            if cuda:
                torch.cuda.synchronize()

        for _ in range(warmup):
            dist.all_reduce(tensor)
        sync()
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(tensor)
        sync()
        seconds = (time.perf_counter() - start) / iters
        node = os.environ.get("KIBAN_NODE") or socket.gethostname()
        mine = rank_result(rank, node, size_bytes, seconds, world)
        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, asdict(mine))
        ranks = tuple(RankResult(**r) for r in sorted(gathered, key=lambda r: r["rank"]))
        return SweepResult(backend, world, size_bytes, iters, ranks)
    finally:
        dist.destroy_process_group()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kiban.health.allreduce", description=__doc__)
    parser.add_argument("--size-mb", type=float, default=64.0, help="tensor size in MB (10^6 B)")
    parser.add_argument("--iters", type=int, default=20, help="timed all_reduces")
    parser.add_argument("--out", type=Path, default=None, help="where rank 0 writes the JSON")
    args = parser.parse_args(argv)
    if args.size_mb <= 0:
        parser.error(f"--size-mb: must be more than 0, not {args.size_mb}")
    if args.iters < 1:
        parser.error(f"--iters: must be at least 1, not {args.iters}")
    result = measure(args.size_mb, args.iters)
    if int(os.environ.get("RANK", "0")) == 0:
        text = result.to_json()
        if args.out is not None:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(text + "\n")
        print(RESULT_PREFIX + text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
