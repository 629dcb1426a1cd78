"""The ``health:`` section of the policy: defaults, and each bad entry named by its field."""

from __future__ import annotations

from typing import Any

import pytest

from kiban.domain.cluster import parse_cluster_config, parse_policy
from kiban.domain.errors import SpecError
from kiban.domain.remediation import RemediationActionKind, RuleStatus, TaintEffect


def rule(**fields: Any) -> dict[str, Any]:
    return {"name": "r", "condition": "GpuEcc", "action": "drain", **fields}


def problems(health: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as caught:
        parse_policy({"health": health})
    return str(caught.value)


def test_defaults_when_absent() -> None:
    health = parse_policy({}).health
    assert health.agent_timeout_seconds == 90.0
    assert health.return_to_service.healthy_checks == 3
    assert (health.circuit_breaker.max_nodes, health.circuit_breaker.max_percent) == (10, 10.0)
    assert len(health.rules) == 10


def test_a_full_section_reads_with_durations_and_a_yaml_true() -> None:
    health = parse_policy(
        {
            "health": {
                "rules": [
                    rule(status=True),
                    rule(
                        name="t",
                        condition="GpuPcie",
                        action="taint",
                        taint={"key": "kiban.dev/pcie", "value": "degraded"},
                    ),
                    rule(
                        name="h",
                        condition="GpuXid",
                        status="Unknown",
                        action="hook",
                        command=["/usr/local/bin/reboot-node", "{node}"],
                        timeoutSeconds="2m",
                    ),
                ],
                "circuitBreaker": {"maxNodes": 2, "maxPercent": 5, "windowSeconds": "30m"},
                "returnToService": {"healthyChecks": 5},
                "flapDamping": {"windowSeconds": "2h", "factor": 3},
                "agentTimeoutSeconds": "5m",
            }
        }
    ).health
    first, taint, hook = health.rules
    assert (first.status, first.action) == (RuleStatus.TRUE, RemediationActionKind.DRAIN)
    assert taint.taint is not None and taint.taint.effect is TaintEffect.NO_SCHEDULE
    assert (hook.status, hook.timeout_seconds) == (RuleStatus.UNKNOWN, 120.0)
    assert health.circuit_breaker.window_seconds == 1800.0
    assert (health.flap_damping.window_seconds, health.agent_timeout_seconds) == (7200.0, 300.0)


@pytest.mark.parametrize(
    ("health", "expected"),
    [
        ({"rules": [rule(), rule(condition="GpuFoo")]}, "health.rules[1].condition"),
        ({"rules": [rule(action="reboot")]}, "health.rules[0].action"),
        ({"rules": [rule(status=False)]}, "health.rules[0].status"),
        ({"rules": [rule(status="False")]}, "health.rules[0].status"),
        (
            {"rules": [rule(), rule(), rule(name="x", action="hook", command="reboot now")]},
            "health.rules[2].command",
        ),
        ({"rules": [rule(action="hook")]}, "health.rules[0].command: "),
        ({"rules": [rule(action="hook", command=[])]}, "health.rules[0].command"),
        ({"rules": [rule(command=["x"])]}, "health.rules[0].command: only a hook rule"),
        ({"rules": [rule(action="taint")]}, "health.rules[0].taint: a taint rule needs"),
        ({"rules": [rule(action="taint", taint={"key": "bad key!"})]}, "health.rules[0].taint.key"),
        (
            {"rules": [rule(action="taint", taint={"key": "k", "effect": "Evict"})]},
            "health.rules[0].taint.effect",
        ),
        ({"rules": [rule(timeoutSeconds=0)]}, "health.rules[0].timeoutSeconds"),
        ({"rules": [rule(name="Bad_Name")]}, "health.rules[0].name"),
        ({"rules": [rule(), rule()]}, "health.rules[1].name: rule r is declared twice"),
        ({"rules": [rule(colour="red")]}, "health.rules[0].colour"),
        ({"circuitBreaker": {"maxNodes": "three"}}, "health.circuitBreaker.maxNodes"),
        ({"circuitBreaker": {"maxNodes": 2.5}}, "health.circuitBreaker.maxNodes"),
        ({"circuitBreaker": {"maxNodes": True}}, "health.circuitBreaker.maxNodes"),
        ({"circuitBreaker": {"maxNodes": 0}}, "health.circuitBreaker.maxNodes"),
        ({"circuitBreaker": {"maxPercent": "ten"}}, "health.circuitBreaker.maxPercent"),
        ({"circuitBreaker": {"maxPercent": 150}}, "health.circuitBreaker.maxPercent"),
        ({"circuitBreaker": {"windowSeconds": "soon"}}, "health.circuitBreaker.windowSeconds"),
        ({"returnToService": {"healthyChecks": "3"}}, "health.returnToService.healthyChecks"),
        ({"flapDamping": {"factor": 0}}, "health.flapDamping.factor"),
        ({"agentTimeoutSeconds": -1}, "health.agentTimeoutSeconds"),
        ({"breaker": {}}, "health.breaker"),
    ],
)
def test_bad_entries_are_named_by_their_field(health: dict[str, Any], expected: str) -> None:
    assert expected in problems(health)


def test_the_cluster_file_takes_a_health_section_too() -> None:
    config = parse_cluster_config(
        {"nodes": [{"name": "n1", "gpus": 8}], "health": {"returnToService": {"healthyChecks": 2}}}
    )
    assert config.health.return_to_service.healthy_checks == 2
    assert config.declares_policy


def test_the_health_policy_reference_example_reads() -> None:
    import re
    from pathlib import Path

    import yaml

    text = (Path(__file__).parents[2] / "docs" / "health-policy.md").read_text()
    (block,) = re.findall(r"```yaml\n(.*?)```", text, re.S)
    health = parse_policy(yaml.safe_load(block)).health
    assert [r.action.value for r in health.rules] == ["drain", "taint", "hook"]
    assert health.rules[2].timeout_seconds == 300.0
