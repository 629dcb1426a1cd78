"""Sweep planning (blocks of idle nodes) and the baseline/degraded decision, as tables."""

from __future__ import annotations

import pytest

from kiban.health.allreduce import RankResult, SweepResult
from kiban.health.sweeps import (
    Block,
    Skipped,
    SkipWhy,
    SweepNode,
    assess,
    block_busbw,
    block_level,
    node_busbw,
    plan_sweep,
)


def node(
    name: str, block: str = "", *, gpus: int = 8, idle: bool = True, ok: bool = True
) -> SweepNode:
    topology = (block, name) if block else ()
    return SweepNode(name, gpus, topology, idle=idle, schedulable=ok)


@pytest.mark.parametrize(
    ("levels", "level"),
    [((), None), (("rack",), 0), (("block", "host"), 0), (("island", "block", "host"), 1)],
)
def test_the_block_level_is_the_one_above_the_hosts(
    levels: tuple[str, ...], level: int | None
) -> None:
    assert block_level(levels) == level


def test_no_topology_makes_one_block_of_the_idle_nodes() -> None:
    plan = plan_sweep([node("a"), node("b"), node("c", idle=False)], level=None)
    assert plan.blocks == (Block("all", ("a", "b"), 8),)
    assert plan.skipped == (Skipped("all", ("c",), SkipWhy.BUSY),)


def test_one_block_per_domain_busy_and_cordoned_nodes_skipped() -> None:
    nodes = [
        node("b0-0", "b0"),
        node("b0-1", "b0"),
        node("b0-2", "b0", idle=False),
        node("b1-0", "b1"),
        node("b1-1", "b1", ok=False),
        node("b2-0", "b2"),
        node("b2-1", "b2"),
    ]
    plan = plan_sweep(nodes, level=0)
    assert plan.blocks == (Block("b0", ("b0-0", "b0-1"), 8), Block("b2", ("b2-0", "b2-1"), 8))
    assert plan.skipped == (
        Skipped("b0", ("b0-2",), SkipWhy.BUSY),
        Skipped("b1", ("b1-0",), SkipWhy.TOO_FEW_IDLE),
        Skipped("b1", ("b1-1",), SkipWhy.UNSCHEDULABLE),
    )


def test_a_block_of_mixed_gpu_counts_is_split_by_count() -> None:
    nodes = [node("a", "b0", gpus=8), node("b", "b0", gpus=8), node("c", "b0", gpus=4)]
    plan = plan_sweep(nodes, level=0)
    assert plan.blocks == (Block("b0-8gpu", ("a", "b"), 8),)
    assert plan.skipped == (Skipped("b0-4gpu", ("c",), SkipWhy.TOO_FEW_IDLE),)


@pytest.mark.parametrize(
    ("busbw", "past", "baseline", "degraded"),
    [
        (100.0, [], 100.0, False),  # the first sweep sets the baseline
        (90.0, [100.0], 100.0, False),
        (80.0, [100.0], 100.0, False),  # exactly the fraction: not below it
        (79.0, [100.0], 100.0, True),
        (70.0, [100.0, 20.0, 110.0], 100.0, True),  # the median, not the mean (76.7)
        (50.0, [60.0, 40.0], 50.0, False),  # an even count: the mean of the middle two
        (10.0, [0.0, float("nan")], 10.0, False),  # unusable past figures are ignored
    ],
)
def test_degraded_below_a_fraction_of_the_median_of_past_sweeps(
    busbw: float, past: list[float], baseline: float, degraded: bool
) -> None:
    a = assess(busbw, past, 0.8)
    assert a.baseline_gbps == pytest.approx(baseline)
    assert a.degraded is degraded
    assert a.fraction == pytest.approx(busbw / baseline)


@pytest.mark.parametrize("fraction", [0.0, -0.1, 1.5, float("nan")])
def test_a_fraction_out_of_range_is_refused(fraction: float) -> None:
    with pytest.raises(ValueError, match="degraded_fraction"):
        assess(1.0, [], fraction)


def test_a_node_counts_its_slowest_rank_and_the_block_its_slowest_node() -> None:
    result = SweepResult(
        "nccl",
        4,
        1,
        1,
        (
            RankResult(0, "a", 1.0, 1.0, 50.0),
            RankResult(1, "a", 1.0, 1.0, 40.0),
            RankResult(2, "b", 1.0, 1.0, 45.0),
            RankResult(3, "b", 1.0, 1.0, 48.0),
        ),
    )
    assert node_busbw(result) == {"a": 40.0, "b": 45.0}
    assert block_busbw(result) == 40.0
