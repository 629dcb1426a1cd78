"""When a job's exclusion of a node ends: at its time bound, or earlier once the node is
healthy again.

A job keeps off a node that failed its preflight, or under which it was requeued as unhealthy,
until ``until`` (``exclude_for_s`` after). Such an exclusion records when it began (``since``)
and the streak of each of the node's healthy (False) conditions then (``streaks``), and ends
early once the node has passed K consecutive healthy checks since: the K of
``health.returnToService.healthyChecks``, which returns a cordoned node to service. A healthy
check is an agent report in which no condition fails, each check that caused the exclusion is
False (Unknown says nothing), and at least one check is False. An exclusion without
``streaks`` (a sweep job kept on its block) ends by time only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kiban.health.conditions import WARNING_ONLY, CheckType, ConditionStatus

CHECK_TYPES = frozenset(t.value for t in CheckType)
WARNINGS = frozenset(t.value for t in WARNING_ONLY)
NOT_PER_CHECK = frozenset({CheckType.ALLREDUCE_DEGRADED.value})
"""Conditions not set by the agent's checks (a sweep's): they bar a node while True, but their
streak counts sweeps, not checks."""


@dataclass(frozen=True, slots=True)
class ConditionStreak:
    """A node's stored condition: its status, since when, and how many reports in a row."""

    type: str
    status: str
    streak: int
    since: float  # its last transition


def healthy_streaks(conditions: Iterable[ConditionStreak]) -> dict[str, int]:
    """What an exclusion records of its node when it begins: each healthy check's streak."""
    return {
        c.type: c.streak
        for c in conditions
        if c.status == ConditionStatus.FALSE.value and c.type not in NOT_PER_CHECK
    }


def _failing(c: ConditionStreak) -> bool:
    return c.status == ConditionStatus.TRUE.value and c.type not in WARNINGS


def healthy_checks_since(entry: Mapping[str, Any], conditions: Sequence[ConditionStreak]) -> int:
    """The consecutive healthy checks of the entry's node since the exclusion began (0 while a
    condition fails, or a check that caused it is not False)."""
    if any(_failing(c) for c in conditions):
        return 0
    since = float(entry.get("since", 0.0))
    base = entry.get("streaks") or {}
    counted = {
        c.type: c
        for c in conditions
        if c.status == ConditionStatus.FALSE.value and c.type not in NOT_PER_CHECK
    }
    causes = [t for t in str(entry.get("reason", "")).split(", ") if t in CHECK_TYPES]
    if not counted or any(t not in counted for t in causes):
        return 0
    counts = []
    for c in counted.values():
        before = int(base.get(c.type, 0)) if c.since <= since else 0  # healthy already then
        counts.append(max(c.streak - before, 0))
    return min(counts)


def ends_when_healthy(entry: Mapping[str, Any]) -> bool:
    """Whether an exclusion ends early once its node is healthy again (one made after a node
    failed, not a sweep job's keep-to-your-block)."""
    return isinstance(entry.get("streaks"), dict)


@dataclass(frozen=True, slots=True)
class Ended:
    """An exclusion ended early: the node, and the healthy checks it passed since."""

    node: str
    checks: int


def end_healthy(
    entries: Sequence[Mapping[str, Any]],
    conditions: Mapping[str, Sequence[ConditionStreak]],
    required: int,
) -> tuple[list[dict[str, Any]], list[Ended]]:
    """A job's exclusions without those whose node has passed ``required`` healthy checks
    since (those ended), in their order."""
    kept: list[dict[str, Any]] = []
    ended: list[Ended] = []
    for entry in entries:
        node = str(entry.get("node", ""))
        if ends_when_healthy(entry):
            checks = healthy_checks_since(entry, conditions.get(node, ()))
            if checks >= required:
                ended.append(Ended(node, checks))
                continue
        kept.append(dict(entry))
    return kept, ended
