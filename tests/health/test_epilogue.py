"""The epilogue's decisions: which nodes of a failed job saw a new Xid or ECC event while it
ran, and when a node it cordoned may return."""

from __future__ import annotations

import pytest

from kiban.health.conditions import CheckType
from kiban.health.epilogue import ConditionChange, findings, may_return
from kiban.health.readings import GpuReading, NodeReading, XidEvent


def change(node: str, type_: str, status: str, at: float, reason: str = "R") -> ConditionChange:
    return ConditionChange(node, type_, status, reason, "", at)


def xids(node: str, *events: tuple[int, float]) -> NodeReading:
    gpu = GpuReading(index=1, xids=tuple(XidEvent(code=c, at=at) for c, at in events))
    return NodeReading(node=node, taken_at=0.0, nvml_available=True, gpus=(gpu,))


@pytest.mark.parametrize(
    ("changes", "readings", "found"),
    [
        ([], [], []),
        ([change("a", "GpuXid", "True", 50.0, "CriticalXid")], [], [("a", "GpuXid", 50.0)]),
        ([change("a", "GpuEcc", "True", 100.0)], [], [("a", "GpuEcc", 100.0)]),  # at the end
        ([change("a", "GpuXid", "True", 5.0)], [], []),  # before the job started
        ([change("a", "GpuXid", "True", 150.0)], [], []),  # after it ended
        ([change("a", "GpuXid", "False", 50.0)], [], []),  # a recovery is no event
        ([change("a", "GpuThermal", "True", 50.0)], [], []),  # not an Xid or ECC event
        ([change("c", "GpuXid", "True", 50.0)], [], []),  # not one of the job's nodes
        ([], [xids("b", (79, 40.0), (48, 30.0))], [("b", "GpuXid", 30.0)]),
        ([], [xids("b", (79, 200.0))], []),
        (
            [change("a", "GpuEcc", "True", 60.0), change("a", "GpuXid", "True", 20.0)],
            [xids("b", (94, 70.0))],
            [("a", "GpuXid", 20.0), ("b", "GpuXid", 70.0)],  # each node's earliest
        ),
    ],
)
def test_new_xid_or_ecc_events_during_the_job(
    changes: list[ConditionChange], readings: list[NodeReading], found: list[tuple[str, str, float]]
) -> None:
    result = findings(["a", "b"], 10.0, 100.0, changes, readings)
    assert [(f.node, f.check.value, f.at) for f in result] == found


def test_a_finding_says_what_was_seen() -> None:
    (finding,) = findings(["b"], 0.0, 100.0, [], [xids("b", (79, 40.0))])
    assert (finding.check, finding.what) == (CheckType.GPU_XID, "GpuXid: Xid 79 on GPU 1")


@pytest.mark.parametrize(
    ("conditions", "reported_at", "returns"),
    [
        ([("GpuXid", "False"), ("GpuEcc", "False")], 120.0, True),
        ([("GpuXid", "False")], 100.0, False),  # no report since the cordon
        ([("GpuXid", "False")], None, False),
        ([("GpuXid", "True")], 120.0, False),
        ([("GpuXid", "Unknown")], 120.0, True),  # cannot tell is not a failure
        ([("GpuThermal", "True")], 120.0, True),  # a warning only
    ],
)
def test_a_cordoned_node_returns_after_a_healthy_report(
    conditions: list[tuple[str, str]], reported_at: float | None, returns: bool
) -> None:
    assert may_return(conditions, reported_at, since=100.0) is returns
