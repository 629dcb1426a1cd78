"""Allreduce sweeps, the pure part: which blocks of idle nodes to measure, and whether a
node's or block's bus bandwidth has fallen below a fraction of its own baseline (the median of
its past sweeps)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from kiban.health.allreduce import SweepResult

WHOLE_CLUSTER = "all"
"""The block of every idle node, when the cluster declares no topology."""

DEFAULT_DEGRADED_FRACTION = 0.8


class SkipWhy(StrEnum):
    """Why a node or block is not measured by a sweep."""

    BUSY = "busy"  # it runs work
    UNSCHEDULABLE = "unschedulable"  # cordoned or unhealthy
    TOO_FEW_IDLE = "too-few-idle-nodes"  # fewer than two idle nodes: nothing to reduce across


@dataclass(frozen=True, slots=True)
class SweepNode:
    """A node as the planner sees it."""

    name: str
    gpus: int
    topology: tuple[str, ...] = ()  # its domain at each topology level, outermost first
    idle: bool = True  # nothing of any job on it
    schedulable: bool = True


@dataclass(frozen=True, slots=True)
class Block:
    """A block to measure: one sweep job across its idle nodes."""

    name: str
    nodes: tuple[str, ...]
    gpus_per_node: int


@dataclass(frozen=True, slots=True)
class Skipped:
    """Nodes of a block not measured, and why."""

    block: str
    nodes: tuple[str, ...]
    why: SkipWhy


@dataclass(frozen=True, slots=True)
class SweepPlan:
    blocks: tuple[Block, ...]
    skipped: tuple[Skipped, ...]


def block_level(levels: Sequence[str]) -> int | None:
    """The topology level whose domains are the blocks: the one above the innermost (the
    innermost is usually the host) when there are two or more, the only one otherwise."""
    if not levels:
        return None
    return len(levels) - 2 if len(levels) >= 2 else 0


def plan_sweep(nodes: Iterable[SweepNode], level: int | None) -> SweepPlan:
    """One block per domain of ``level`` (None: one block of the whole cluster), each of its
    idle schedulable nodes; busy and unschedulable nodes are skipped, and so is a block left
    with fewer than two idle nodes. A block's nodes must all have the same GPU count (a sweep
    job gives each rank a whole node): the count most of them have, the others skipped as busy
    would be wrong, so a mixed block is split by GPU count."""
    grouped: dict[tuple[str, int], list[SweepNode]] = {}
    skipped: list[Skipped] = []
    for node in sorted(nodes, key=lambda n: n.name):
        if level is None:
            domain = WHOLE_CLUSTER
        elif len(node.topology) > level:
            domain = node.topology[level]
        else:
            continue  # no domain at that level: not in any block
        if not node.schedulable:
            skipped.append(Skipped(domain, (node.name,), SkipWhy.UNSCHEDULABLE))
        elif not node.idle:
            skipped.append(Skipped(domain, (node.name,), SkipWhy.BUSY))
        else:
            grouped.setdefault((domain, node.gpus), []).append(node)
    blocks: list[Block] = []
    split = {domain for domain, _ in grouped if sum(1 for d, _ in grouped if d == domain) > 1}
    for (domain, gpus), members in sorted(grouped.items()):
        name = f"{domain}-{gpus}gpu" if domain in split else domain
        names = tuple(n.name for n in members)
        if len(members) < 2:
            skipped.append(Skipped(name, names, SkipWhy.TOO_FEW_IDLE))
        else:
            blocks.append(Block(name, names, gpus))
    return SweepPlan(tuple(blocks), tuple(sorted(skipped, key=lambda s: (s.block, s.nodes))))


@dataclass(frozen=True, slots=True)
class Assessment:
    """A measurement against its baseline: ``fraction`` = busbw / baseline."""

    busbw_gbps: float
    baseline_gbps: float
    fraction: float
    degraded: bool


def assess(busbw_gbps: float, past: Sequence[float], degraded_fraction: float) -> Assessment:
    """The baseline is the median of the past measurements; the first measurement is its own
    baseline (never degraded). Degraded: below ``degraded_fraction`` of the baseline."""
    if not 0 < degraded_fraction <= 1 or math.isnan(degraded_fraction):
        raise ValueError(f"degraded_fraction: must be in (0, 1], not {degraded_fraction!r}")
    usable = [v for v in past if v > 0 and math.isfinite(v)]
    baseline = statistics.median(usable) if usable else busbw_gbps
    fraction = busbw_gbps / baseline if baseline > 0 else 1.0
    return Assessment(busbw_gbps, baseline, fraction, fraction < degraded_fraction)


def node_busbw(result: SweepResult) -> dict[str, float]:
    """Each node's bus bandwidth in a sweep: its slowest rank's."""
    figures: dict[str, float] = {}
    for rank in result.ranks:
        known = figures.get(rank.node)
        figures[rank.node] = rank.busbw_gbps if known is None else min(known, rank.busbw_gbps)
    return figures


def block_busbw(result: SweepResult) -> float:
    """The block's bus bandwidth: its slowest rank's (an all_reduce waits for every rank)."""
    return min(r.busbw_gbps for r in result.ranks)
