"""promtool checks the shipped alert rules and Prometheus configuration, and runs the rules'
unit tests (deploy/prometheus/alerts-test.yml)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prom_support import ALERTS, ALERTS_TEST, PROMETHEUS_CONFIG

pytestmark = pytest.mark.prometheus

ISSUE_ALERTS = {
    "KibanNodeUnhealthy",
    "KibanGpuCriticalXid",
    "KibanGpuEccErrors",
    "KibanRemediationBreakerOpen",
    "KibanJobsPendingPastForecast",
    "KibanQueueStarvedWhileQuotaIdle",
    "KibanGpusIdleWhileJobsWait",
    "KibanBudgetUsedUp",
    "KibanControlPlaneDown",
    "KibanSchedulingCyclesSlow",
    "KibanNodeAgentNotReporting",
}


def run(tool: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(tool), *map(str, args)], capture_output=True, text=True, timeout=60, check=False
    )


def alert_rules() -> list[dict[str, object]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_the_alert_rules_pass_promtool_check_rules(promtool: Path) -> None:
    checked = run(promtool, "check", "rules", ALERTS)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in checked.stdout


def test_a_broken_rule_file_fails_promtool_check_rules(promtool: Path, tmp_path: Path) -> None:
    broken = tmp_path / "alerts.yml"
    text = ALERTS.read_text()
    assert "kiban_remediation_breaker_open == 1" in text
    broken.write_text(
        text.replace("kiban_remediation_breaker_open == 1", "kiban_remediation_breaker_open == (")
    )
    checked = run(promtool, "check", "rules", broken)
    assert checked.returncode != 0
    output = checked.stdout + checked.stderr
    assert '"KibanRemediationBreakerOpen": could not parse expression' in output, output


def test_every_alert_of_the_issue_is_there_with_severity_and_annotations() -> None:
    rules = alert_rules()
    assert {rule["alert"] for rule in rules} == ISSUE_ALERTS
    for rule in rules:
        labels = rule["labels"]
        annotations = rule["annotations"]
        assert isinstance(labels, dict) and labels["severity"] in ("critical", "warning")
        assert isinstance(annotations, dict)
        assert set(annotations) == {"summary", "description", "runbook"}, rule["alert"]


def test_the_alert_unit_tests_pass(promtool: Path) -> None:
    tested = run(promtool, "test", "rules", ALERTS_TEST)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_alert_has_unit_tests_that_see_it_fire_and_stay_silent() -> None:
    tests = yaml.safe_load(ALERTS_TEST.read_text())["tests"]
    fired: set[str] = set()
    silent: set[str] = set()
    for case in tests:
        for check in case["alert_rule_test"]:
            (fired if check["exp_alerts"] else silent).add(check["alertname"])
    assert fired == ISSUE_ALERTS
    assert silent == ISSUE_ALERTS


def test_an_alert_unit_test_fails_when_a_rule_changes(promtool: Path, tmp_path: Path) -> None:
    """The unit tests can fail: with the breaker alert's comparison inverted they do."""
    shutil.copy(ALERTS_TEST, tmp_path / "alerts-test.yml")
    text = ALERTS.read_text()
    (tmp_path / "alerts.yml").write_text(
        text.replace("kiban_remediation_breaker_open == 1", "kiban_remediation_breaker_open == 0")
    )
    tested = run(promtool, "test", "rules", tmp_path / "alerts-test.yml")
    assert tested.returncode != 0
    assert "KibanRemediationBreakerOpen" in tested.stdout + tested.stderr


def test_the_example_prometheus_config_passes_promtool_check_config(promtool: Path) -> None:
    checked = run(promtool, "check", "config", PROMETHEUS_CONFIG)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    [job] = config["scrape_configs"]
    [discovery] = job["http_sd_configs"]
    assert discovery["url"].endswith("/api/v1/discovery/prometheus")
    assert config["rule_files"] == ["alerts.yml"]
    assert config["alerting"]["alertmanagers"]
