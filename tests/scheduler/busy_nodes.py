"""Running jobs packed onto 8-GPU nodes, drawn for the scheduler's parity tests
(``test_fast_paths``, ``test_shape_failures``, ``test_verdicts``, ``test_order_ground``): each
job takes 1, 2, 4 or 8 GPUs of a node that still has them, in a queue, at a priority, started
at a drawn time, most with a time limit; what a test adds to them it adds after."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import strategies as st

from kiban.testing import running
from kiban.testing.job_builders import RunningBuilder


def busy_runs(
    draw: st.DrawFn,
    free: dict[str, int],
    count: int,
    *,
    queues: Sequence[str],
    priorities: Sequence[int] = (100, 1000),
    started_by: int = 50,
    limits: Sequence[int] = (60, 100, 100, 200),
) -> list[RunningBuilder]:
    """Up to ``count`` running jobs ``r{i}`` on the nodes of ``free`` (free GPUs per node, taken
    as jobs land); four in five with a time limit drawn from ``limits``."""
    names = sorted(free)
    runs = []
    for i in range(count):
        node = draw(st.sampled_from(names))
        gpus = draw(st.sampled_from([1, 2, 4, 8]))
        if free[node] < gpus:
            continue
        free[node] -= gpus
        r = (
            running(f"r{i}")
            .queue(draw(st.sampled_from(queues)))
            .priority(draw(st.sampled_from(priorities)))
            .started(float(draw(st.integers(0, started_by))))
            .on(node, gpus=gpus)
        )
        if draw(st.integers(0, 4)):
            r.max_runtime(float(draw(st.sampled_from(limits))))
        runs.append(r)
    return runs
