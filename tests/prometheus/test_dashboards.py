"""The Grafana files are in the shape provisioning loads, and the committed dashboards are what
deploy/grafana/generate.py writes (no server needed)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
import yaml
from prom_support import DASHBOARDS, DEPLOY

GRAFANA = DEPLOY / "grafana"
PANEL_TYPES = {"timeseries", "stat", "table"}


def provisioned_datasource() -> dict[str, Any]:
    text = (GRAFANA / "provisioning" / "datasources" / "prometheus.yaml").read_text()
    provisioning = yaml.safe_load(text)
    assert provisioning["apiVersion"] == 1
    [datasource] = provisioning["datasources"]
    assert datasource["type"] == "prometheus"
    found: dict[str, Any] = datasource
    return found


def test_the_five_dashboards_of_the_issue_are_shipped() -> None:
    titles = {json.loads(path.read_text())["title"] for path in DASHBOARDS}
    assert titles == {
        "kiban / Cluster overview",
        "kiban / Queues and fair share",
        "kiban / Nodes and GPU health",
        "kiban / Jobs",
        "kiban / Serving",
    }


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_a_dashboard_has_the_shape_provisioning_loads(path: Any) -> None:
    dashboard = json.loads(path.read_text())
    uid = provisioned_datasource()["uid"]
    assert isinstance(dashboard["uid"], str) and 0 < len(dashboard["uid"]) <= 40
    assert dashboard["title"] and isinstance(dashboard["schemaVersion"], int)
    assert dashboard["panels"]
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in dashboard["panels"]:
        where = f"{path.name}: panel {panel['title']!r}"
        assert panel["type"] in PANEL_TYPES, where
        assert panel["datasource"] == {"type": "prometheus", "uid": uid}, where
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0, where
        assert panel["targets"], where
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), where
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == uid, where
            assert isinstance(target["expr"], str) and target["expr"].strip(), where
            assert "$" not in target["expr"], f"{where}: a template variable cannot be evaluated"


def test_the_dashboard_uids_are_distinct() -> None:
    uids = [json.loads(path.read_text())["uid"] for path in DASHBOARDS]
    assert len(uids) == len(set(uids))


def test_the_dashboard_provider_loads_json_files_from_a_folder() -> None:
    provisioning = yaml.safe_load(
        (GRAFANA / "provisioning" / "dashboards" / "kiban.yaml").read_text()
    )
    assert provisioning["apiVersion"] == 1
    [provider] = provisioning["providers"]
    assert provider["type"] == "file" and provider["options"]["path"]


def test_the_committed_dashboards_are_what_the_generator_writes() -> None:
    checked = subprocess.run(
        [sys.executable, str(GRAFANA / "generate.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert checked.returncode == 0, checked.stderr


def test_the_alertmanager_example_routes_only_to_receivers_it_defines() -> None:
    config = yaml.safe_load((DEPLOY / "alertmanager" / "alertmanager.yml").read_text())
    receivers = {receiver["name"] for receiver in config["receivers"]}
    routes = [config["route"], *config["route"].get("routes", [])]
    assert {route["receiver"] for route in routes} <= receivers
    for receiver in config["receivers"]:
        assert receiver["webhook_configs"], receiver["name"]
        for webhook in receiver["webhook_configs"]:
            assert webhook["url"].startswith("http")
