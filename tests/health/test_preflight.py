"""Preflight's decisions: which nodes to ask, the verdict from conditions, the exclusions kept."""

from __future__ import annotations

import pytest

from kiban.domain.cluster import parse_cluster_config
from kiban.domain.errors import SpecError
from kiban.domain.preflight_policy import UnreachableAgent
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
    judge_unreachable,
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
        stored,
        {"n2": failure_reason(failed)},
        now=100.0,
        settings=PreflightSettings(),
        healthy={"n2": {"GpuBus": 7}},
    )
    assert result == [
        {"node": "n1", "until": 500.0, "reason": "GpuBus"},
        {
            "node": "n2",
            "until": 1900.0,
            "reason": "GpuEcc",
            "since": 100.0,
            "streaks": {"GpuBus": 7},
        },
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


FAIL_IF_STALE, PASS = UnreachableAgent.FAIL_IF_STALE, UnreachableAgent.PASS


@pytest.mark.parametrize(
    ("reported_at", "conditions", "rule", "passed", "reason"),
    [
        # silent for longer than the agent timeout (90 s): its conditions are Unknown, it fails
        (5.0, [condition(CheckType.GPU_ECC, F)], FAIL_IF_STALE, False, "AgentUnreachable"),
        (None, [], FAIL_IF_STALE, False, "AgentUnreachable"),  # it never reported
        # a healthy report 30 s ago, its agent timed out once: it passes with a note
        (70.0, [condition(CheckType.GPU_ECC, F)], FAIL_IF_STALE, True, ""),
        # a recent report that was failing: it fails on that
        (70.0, [condition(CheckType.GPU_ECC, T)], FAIL_IF_STALE, False, "GpuEcc"),
        (9.9, [condition(CheckType.GPU_ECC, F)], FAIL_IF_STALE, False, "AgentUnreachable"),
        (10.0, [condition(CheckType.GPU_ECC, F)], FAIL_IF_STALE, True, ""),  # 90 s: not yet stale
        # told to pass: every unanswering agent's node passes, as before
        (5.0, [], PASS, True, ""),
        (None, [condition(CheckType.GPU_ECC, T)], PASS, True, ""),
    ],
)
def test_a_silent_agent_fails_its_node_only_when_its_last_report_is_stale(
    reported_at: float | None,
    conditions: list[Condition],
    rule: UnreachableAgent,
    passed: bool,
    reason: str,
) -> None:
    state = NodeState("n1", "h:1", reported_at)
    verdict = judge_unreachable(state, "timed out", conditions, 100.0, 90.0, rule)
    assert verdict.source is Source.UNREACHABLE
    assert verdict.passed is passed
    assert "did not answer: timed out" in verdict.note
    if passed:
        assert verdict.refusal == ""
    else:
        assert failure_reason(verdict) == reason
        assert describe_failure(verdict).startswith(f"n1: {reason}")
    if reason == "AgentUnreachable":
        assert "agent timeout of 90 s" in verdict.refusal


def test_the_cluster_file_names_a_bad_unreachable_agent_setting() -> None:
    config = parse_cluster_config({"health": {"preflight": {"unreachableAgent": "pass"}}})
    assert config.health.preflight.unreachable_agent is PASS
    assert parse_cluster_config({}).health.preflight.unreachable_agent is FAIL_IF_STALE
    for bad in ({"unreachableAgent": "ignore"}, {"unreachableAgent": True}, {"stale": 1}):
        with pytest.raises(SpecError) as raised:
            parse_cluster_config({"health": {"preflight": bad}})
        assert f"health.preflight.{next(iter(bad))}" in str(raised.value)
