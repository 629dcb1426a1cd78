"""The dashboard's build: what ``scripts/build-web.sh`` (run by ``make setup``) leaves in the
package, and how it fails without Node.

The bundle must carry every ``data-testid`` of issue 24's DOM contract (the browser tests find
pages by them alone), and ``index.html`` must load the assets it names.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "build-web.sh"
ASSETS = ROOT / "src" / "kiban" / "web" / "assets"
BUILT = ("index.html", "app.js", "app.css", "uPlot.min.css")

CONTRACT_TESTIDS = (
    "signin-token",
    "signin-submit",
    "signin-error",
    "nav-overview",
    "nav-jobs",
    "nav-submit",
    "nav-nodes",
    "nav-services",
    "nav-usage",
    "nav-notebooks",
    "whoami",
    "signout",
    "overview-flavors",
    "flavor-row",
    "overview-queues",
    "queue-bar",
    "overview-pending",
    "pending-reason",
    "overview-tenants",
    "tenant-row",
    "jobs-table",
    "job-row",
    "job-state",
    "job-queue",
    "job-reason",
    "job-eta",
    "job-position",
    "jobs-filter-state",
    "jobs-filter-queue",
    "jobs-filter-name",
    "jobs-prev",
    "jobs-next",
    "jobs-total",
    "job-title",
    "job-spec",
    "job-placement",
    "placement-node",
    "job-events",
    "job-event",
    "job-logs",
    "job-logs-rank",
    "job-cancel",
    "job-checkpoint",
    "job-resubmit",
    "not-found",
    "submit-form-tab",
    "submit-manifest-tab",
    "submit-name",
    "submit-command",
    "submit-nodes",
    "submit-gpus",
    "submit-queue",
    "submit-priority",
    "submit-manifest",
    "submit-manifest-file",
    "submit-button",
    "field-error",
    "submit-error",
    "nodes-table",
    "node-row",
    "node-conditions",
    "node-cordon",
    "node-uncordon",
    "services-table",
    "service-row",
    "service-revisions",
    "service-traffic",
    "service-replicas",
    "service-latency",
    "chat-input",
    "chat-send",
    "chat-messages",
    "chat-message",
    "chat-streaming",
    "embed-input",
    "embed-send",
    "embed-result",
    "usage-chart-gpu-hours",
    "usage-chart-decayed",
    "usage-table",
    "notebooks-table",
    "notebook-row",
    "notebook-open",
    "notebook-stop",
    "notebook-name",
    "notebook-gpus",
    "notebook-idle-timeout",
    "notebook-start",
)


def built_assets() -> Path:
    missing = [name for name in BUILT if not (ASSETS / name).is_file()]
    if missing:
        pytest.fail(f"dashboard not built ({', '.join(missing)} missing): run `make setup`")
    return ASSETS


def test_index_loads_every_built_asset_by_its_content_hash() -> None:
    index = (built_assets() / "index.html").read_text()
    for name in ("app.js", "app.css", "uPlot.min.css"):
        assert re.search(rf'"/assets/{re.escape(name)}\?v=[0-9a-f]{{12}}"', index), name


def test_the_bundle_carries_every_testid_of_the_dom_contract() -> None:
    bundle = (built_assets() / "app.js").read_text()
    missing = [testid for testid in CONTRACT_TESTIDS if f'"{testid}"' not in bundle]
    assert missing == []


def test_without_node_the_build_says_what_to_install(tmp_path: Path) -> None:
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "dirname").symlink_to("/usr/bin/dirname")
    result = subprocess.run(
        ["/bin/bash", str(SCRIPT)],
        env={"PATH": str(tools)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 1
    assert "'node' not found" in result.stderr
    assert "Node.js" in result.stderr
