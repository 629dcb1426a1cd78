"""Paths of the shipped Prometheus, Alertmanager and Grafana files the tier checks."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
ALERTS_TEST = DEPLOY / "prometheus" / "alerts-test.yml"
PROMETHEUS_CONFIG = DEPLOY / "prometheus" / "prometheus.yml"
DASHBOARDS = sorted((DEPLOY / "grafana" / "dashboards").glob("*.json"))
