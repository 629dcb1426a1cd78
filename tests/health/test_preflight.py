"""Preflight's decisions: which nodes to ask, the verdict from conditions, the exclusions kept."""

from __future__ import annotations

import pytest

from kiban.health.conditions import CheckType, Condition, ConditionStatus
from kiban.health.preflight import (
    NodeState,
    NodeVerdict,
    PreflightSettings,
    PreflightSettingsError,
    Source,
    describe_failure,
    exclusions_after,
    failure_reason,
    judge,
    needs_preflight,
    to_ask,
)


def condition(check: CheckType, status: ConditionStatus, reason: str = "R") -> Condition:
    return Condition(type=check, status=status, reason=reason, last_transition_time=0.0)


T, F, U = ConditionStatus.TRUE, ConditionStatus.FALSE, ConditionStatus.UNKNOWN


@pytest.mark.parametrize(
    ("conditions", "failing"),
    [
        ([], []),
        ([condition(CheckType.GPU_ECC, F), condition(CheckType.GPU_XID, F)], []),
        ([condition(CheckType.GPU_ECC, U)], []),  # cannot tell (no NVML): not a failure
        ([condition(CheckType.GPU_THERMAL, T)], []),  # a warning only
        ([condition(CheckType.GPU_ECC, T), condition(CheckType.GPU_BUS, F)], ["GpuEcc"]),
        (
            [condition(CheckType.GPU_XID, T), condition(CheckType.GPU_BUS, T)],
            ["GpuBus", "GpuXid"],
        ),
        ([condition(CheckType.ALLREDUCE_DEGRADED, T)], ["AllreduceDegraded"]),
    ],
)
def test_a_node_fails_on_any_failing_condition(
    conditions: list[Condition], failing: list[str]
) -> None:
    verdict = judge("n1", Source.AGENT, conditions)
    assert [c.type.value for c in verdict.failing] == failing
    assert verdict.passed is (not failing)


@pytest.mark.parametrize(
    ("nodes", "settings", "checked"),
    [
        (["a"], PreflightSettings(), False),
        (["a", "a", "a"], PreflightSettings(), False),  # many replicas, one node
        (["a", "b"], PreflightSettings(), True),
        (["a", "b"], PreflightSettings(enabled=False), False),
        (["a"], PreflightSettings(min_nodes=1), True),
    ],
)
def test_gangs_spanning_several_nodes_are_checked(
    nodes: list[str], settings: PreflightSettings, checked: bool
) -> None:
    assert needs_preflight(nodes, settings) is checked


def test_only_agents_not_heard_from_lately_are_asked() -> None:
    states = [
        NodeState("fresh", "h:1", reported_at=98.0),
        NodeState("stale", "h:1", reported_at=90.0),
        NodeState("never", "h:1", reported_at=None),
        NodeState("no-agent", "", reported_at=None),
    ]
    assert to_ask(states, now=100.0, settings=PreflightSettings(fresh_s=5.0)) == [
        "stale",
        "never",
    ]
    assert to_ask(states, now=100.0, settings=PreflightSettings(fresh_s=0.0)) == [
        "fresh",
        "stale",
        "never",
    ]


def test_exclusions_add_the_failed_nodes_and_drop_the_expired() -> None:
    failed = judge("n2", Source.AGENT, [condition(CheckType.GPU_ECC, T, "EccUncorrectable")])
    stored: list[dict[str, object]] = [
        {"node": "old", "until": 50.0, "reason": "GpuXid"},
        {"node": "n1", "until": 500.0, "reason": "GpuBus"},
        {"node": "n2", "until": 120.0, "reason": "GpuXid"},
    ]
    result = exclusions_after(
        stored, {"n2": failure_reason(failed)}, now=100.0, settings=PreflightSettings()
    )
    assert result == [
        {"node": "n1", "until": 500.0, "reason": "GpuBus"},
        {"node": "n2", "until": 1900.0, "reason": "GpuEcc"},
    ]


def test_the_failure_names_the_node_and_the_condition() -> None:
    verdict = NodeVerdict(
        "n2",
        Source.AGENT,
        (
            Condition(
                type=CheckType.GPU_ECC,
                status=T,
                reason="EccUncorrectable",
                message="2 volatile uncorrectable errors on GPU 0",
                last_transition_time=0.0,
            ),
        ),
    )
    assert describe_failure(verdict) == (
        "n2: GpuEcc (EccUncorrectable: 2 volatile uncorrectable errors on GPU 0)"
    )


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("timeout_s", 0, "timeout_s: must be more than 0 seconds"),
        ("timeout_s", "5", "timeout_s: must be a number of seconds"),
        ("fresh_s", -1, "fresh_s: must be 0 seconds or more"),
        ("exclude_for_s", float("nan"), "exclude_for_s: must be a number of seconds"),
        ("min_nodes", 0, "min_nodes: must be at least 1"),
        ("enabled", "yes", "enabled: must be true or false"),
    ],
)
def test_bad_settings_name_the_field(field: str, value: object, said: str) -> None:
    with pytest.raises(PreflightSettingsError, match=said):
        PreflightSettings(**{field: value})  # type: ignore[arg-type]
