"""When a job's exclusion of a node ends early: after K consecutive healthy checks of the node
since the exclusion began (``kiban.health.exclusions``); a sweep's keep-to-your-block never."""

from __future__ import annotations

from typing import Any

import pytest

from kiban.health.exclusions import (
    ConditionStreak,
    Ended,
    end_healthy,
    healthy_checks_since,
    healthy_streaks,
)

SINCE = 100.0


def c(kind: str, status: str, streak: int, since: float) -> ConditionStreak:
    return ConditionStreak(kind, status, streak, since)


def excluded(reason: str = "GpuEcc", **streaks: int) -> dict[str, Any]:
    return {"node": "n1", "until": 1900.0, "reason": reason, "since": SINCE, "streaks": streaks}


@pytest.mark.parametrize(
    ("entry", "conditions", "checks"),
    [
        # the failing check turned False after the exclusion: its streak is all since
        (excluded(), [c("GpuEcc", "False", 2, 130.0)], 2),
        # another check healthy before and after: only the reports since count
        (
            excluded(GpuBus=10),
            [c("GpuEcc", "False", 3, 130.0), c("GpuBus", "False", 12, 10.0)],
            2,
        ),
        # still failing, or its cause not seen healthy (Unknown says nothing): none
        (excluded(), [c("GpuEcc", "True", 4, 90.0)], 0),
        (excluded(), [c("GpuEcc", "Unknown", 4, 130.0)], 0),
        (excluded(), [], 0),
        # a warning does not bar it; a sweep's AllreduceDegraded True does, and is not counted
        (excluded(), [c("GpuEcc", "False", 3, 130.0), c("GpuThermal", "True", 9, 0.0)], 3),
        (excluded(), [c("GpuEcc", "False", 3, 130.0), c("AllreduceDegraded", "True", 1, 0.0)], 0),
        (excluded(), [c("GpuEcc", "False", 3, 130.0), c("AllreduceDegraded", "False", 1, 0.0)], 3),
        # an agent that was unreachable: every check healthy before counts only what followed
        (excluded("AgentUnreachable", GpuEcc=40), [c("GpuEcc", "False", 41, 5.0)], 1),
        # a check that failed and recovered after the exclusion began: counted from its recovery
        (excluded("NodeUnhealthy", GpuEcc=40), [c("GpuEcc", "False", 2, 150.0)], 2),
    ],
)
def test_healthy_checks_are_counted_since_the_exclusion_began(
    entry: dict[str, Any], conditions: list[ConditionStreak], checks: int
) -> None:
    assert healthy_checks_since(entry, conditions) == checks


def test_an_exclusion_records_the_streaks_of_healthy_checks_only() -> None:
    assert healthy_streaks(
        [
            c("GpuEcc", "False", 4, 0.0),
            c("GpuXid", "True", 2, 0.0),
            c("GpuBus", "Unknown", 7, 0.0),
            c("AllreduceDegraded", "False", 3, 0.0),
        ]
    ) == {"GpuEcc": 4}


def test_only_exclusions_of_nodes_healthy_k_times_end() -> None:
    entries = [
        {**excluded(), "node": "healed"},
        {**excluded(), "node": "healing"},
        {"node": "other-block", "until": 1900.0, "reason": "not in sweep block a"},  # by time only
    ]
    conditions = {
        "healed": [c("GpuEcc", "False", 3, 130.0)],
        "healing": [c("GpuEcc", "False", 2, 130.0)],
        "other-block": [c("GpuEcc", "False", 99, 130.0)],
    }
    kept, ended = end_healthy(entries, conditions, required=3)
    assert [e["node"] for e in kept] == ["healing", "other-block"]
    assert ended == [Ended("healed", 3)]
