"""Write kiban's Grafana dashboards (``dashboards/*.json``) from the tables below.

The JSON files are what Grafana's provisioning loads and are committed; this script keeps them
regular (one panel shape, one datasource, a grid laid out row by row). After changing a table:

    python deploy/grafana/generate.py           # rewrite dashboards/*.json
    python deploy/grafana/generate.py --check   # exit 1 if a committed file differs

Every panel's query uses the fixed metric names of issue 23 and no template variable, so each
query can be evaluated as it stands (tests/prometheus evaluates them all against a live kiban).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DATASOURCE = {"type": "prometheus", "uid": "kiban-prometheus"}
"""The datasource provisioned by provisioning/datasources/prometheus.yaml."""
DASHBOARDS_DIR = Path(__file__).resolve().parent / "dashboards"
GRID_COLUMNS = 24


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    queries: tuple[Query, ...]
    kind: str = "timeseries"  # timeseries, stat or table
    unit: str = "short"
    width: int = 12
    height: int = 8


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    panels: tuple[Panel, ...] = field(default_factory=tuple)


def q(expr: str, legend: str = "") -> Query:
    return Query(expr, legend)


def stat(title: str, description: str, expr: str, unit: str = "short") -> Panel:
    return Panel(title, description, (q(expr),), kind="stat", unit=unit, width=4, height=4)


CLUSTER = Dashboard(
    uid="kiban-cluster",
    title="kiban / Cluster overview",
    description="GPUs, jobs and the control plane of one kiban cluster at a glance.",
    panels=(
        stat("GPUs", "GPUs of every node kiban knows.", "sum(kiban_node_gpus)"),
        stat("GPUs allocated", "GPUs held by running jobs.", "sum(kiban_node_gpus_allocated)"),
        stat(
            "Schedulable nodes",
            "Nodes that take new work (not cordoned).",
            "sum(kiban_node_schedulable)",
        ),
        stat("Pending jobs", "Jobs waiting in every queue.", "sum(kiban_pending_jobs)"),
        stat(
            "GPUs idle while jobs wait",
            "Idle GPUs on schedulable nodes while jobs are pending.",
            "kiban_idle_gpus_while_jobs_wait",
        ),
        stat(
            "Control plane up",
            "1 when Prometheus scrapes kiban's control plane.",
            'up{kiban_component="control-plane"}',
        ),
        Panel(
            "GPU allocation",
            "Share of the cluster's GPUs held by running jobs.",
            (q("sum(kiban_node_gpus_allocated) / sum(kiban_node_gpus)", "allocated"),),
            unit="percentunit",
        ),
        Panel(
            "Jobs per minute",
            "Jobs admitted and finished (by end state) per minute.",
            (
                q("sum(rate(kiban_admitted_jobs_total[5m])) * 60", "admitted"),
                q("sum by (state) (rate(kiban_finished_jobs_total[5m])) * 60", "{{state}}"),
            ),
        ),
        Panel(
            "Scheduling cycle duration",
            "Percentiles of the scheduler's cycle over 5 minutes.",
            (
                q(
                    "histogram_quantile(0.5, sum by (le) "
                    "(rate(kiban_scheduling_cycle_seconds_bucket[5m])))",
                    "p50",
                ),
                q(
                    "histogram_quantile(0.99, sum by (le) "
                    "(rate(kiban_scheduling_cycle_seconds_bucket[5m])))",
                    "p99",
                ),
            ),
            unit="s",
        ),
        Panel(
            "Forecast horizon",
            "How far ahead the scheduler forecasts start times.",
            (q("kiban_forecast_horizon_seconds", "horizon"),),
            unit="s",
        ),
        Panel(
            "Remediation",
            "Nodes cordoned by automatic remediation, and whether its circuit breaker is open.",
            (
                q("kiban_remediation_nodes_cordoned", "cordoned by remediation"),
                q("kiban_remediation_breaker_open", "breaker open"),
            ),
        ),
        Panel(
            "kiban version",
            "The control plane's build.",
            (q("kiban_build_info", "{{version}}"),),
            kind="table",
        ),
    ),
)

QUEUES = Dashboard(
    uid="kiban-queues",
    title="kiban / Queues and fair share",
    description="Pending work, admission waits and quota use per queue; fair share per tenant.",
    panels=(
        Panel(
            "Pending jobs by queue and reason",
            "Jobs waiting, by queue and the reason they wait.",
            (q("sum by (queue, reason) (kiban_pending_jobs)", "{{queue}} {{reason}}"),),
        ),
        Panel(
            "Jobs pending past their forecast",
            "Pending jobs whose forecast start time has passed.",
            (q("sum by (queue) (kiban_jobs_pending_past_forecast)", "{{queue}}"),),
        ),
        Panel(
            "Admission wait (p90)",
            "90th percentile of the time from submission to admission, per queue.",
            (
                q(
                    "histogram_quantile(0.9, sum by (queue, le) "
                    "(rate(kiban_admission_wait_time_seconds_bucket[5m])))",
                    "{{queue}}",
                ),
            ),
            unit="s",
        ),
        Panel(
            "Admissions and preemptions per minute",
            "Jobs admitted, and preempted by reason, per queue.",
            (
                q("sum by (queue) (rate(kiban_admitted_jobs_total[5m])) * 60", "{{queue}}"),
                q(
                    "sum by (queue, reason) (rate(kiban_preempted_jobs_total[5m])) * 60",
                    "{{queue}} preempted: {{reason}}",
                ),
            ),
        ),
        Panel(
            "Quota by queue and flavor",
            "Nominal quota, GPUs used, borrowed from the cohort and lent to it.",
            (
                q(
                    "sum by (queue, flavor) (kiban_quota_nominal_gpus)",
                    "{{queue}}/{{flavor}} nominal",
                ),
                q("sum by (queue, flavor) (kiban_quota_used_gpus)", "{{queue}}/{{flavor}} used"),
                q(
                    "sum by (queue, flavor) (kiban_quota_borrowed_gpus)",
                    "{{queue}}/{{flavor}} borrowed",
                ),
                q("sum by (queue, flavor) (kiban_quota_lent_gpus)", "{{queue}}/{{flavor}} lent"),
            ),
            width=24,
        ),
        Panel(
            "Quota used",
            "GPUs used over nominal quota, per queue (over 1: borrowing).",
            (
                q(
                    "sum by (queue) (kiban_quota_used_gpus) "
                    "/ sum by (queue) (kiban_quota_nominal_gpus)",
                    "{{queue}}",
                ),
            ),
            unit="percentunit",
        ),
        Panel(
            "Fair share standing",
            "Each tenant's decayed usage over its share: under 1, it is under its share.",
            (q("kiban_tenant_fair_share", "{{tenant}}"),),
        ),
        Panel(
            "Decayed usage",
            "Each tenant's GPU-seconds, decayed by the fair-share half-life.",
            (q("kiban_tenant_decayed_usage_gpu_seconds", "{{tenant}}"),),
        ),
    ),
)

NODES = Dashboard(
    uid="kiban-nodes",
    title="kiban / Nodes and GPU health",
    description="Health checks, remediation and the DCGM-named GPU telemetry of the node agents.",
    panels=(
        Panel(
            "Conditions by status",
            "Nodes per check and status (True: the problem is present).",
            (
                q(
                    "sum by (condition, status) (kiban_node_condition)",
                    "{{condition}} {{status}}",
                ),
            ),
            kind="table",
        ),
        Panel(
            "Failing conditions",
            "Each node's checks whose status is True.",
            (q('kiban_node_condition{status="True"} == 1', "{{node}} {{condition}}"),),
            kind="table",
        ),
        Panel(
            "GPUs per node",
            "GPUs of each node and those held by running jobs.",
            (
                q("kiban_node_gpus", "{{node}} GPUs"),
                q("kiban_node_gpus_allocated", "{{node}} allocated"),
            ),
        ),
        Panel(
            "Nodes out of service",
            "Nodes that take no new work (cordoned by an admin or by remediation).",
            (q("sum(1 - kiban_node_schedulable)", "unschedulable"),),
        ),
        Panel(
            "Agent report age",
            "Seconds since each node's agent last reported.",
            (q("kiban_node_agent_report_age_seconds", "{{node}}"),),
            unit="s",
        ),
        Panel(
            "Remediation actions (1 h)",
            "Actions taken by remediation in the last hour, by action, check and outcome.",
            (
                q(
                    "sum by (action, check, outcome) "
                    "(increase(kiban_remediation_actions_total[1h]))",
                    "{{action}} {{check}} {{outcome}}",
                ),
            ),
        ),
        Panel(
            "GPU utilization",
            "DCGM_FI_DEV_GPU_UTIL of each GPU.",
            (q("DCGM_FI_DEV_GPU_UTIL", "{{Hostname}}/{{gpu}}"),),
            unit="percent",
        ),
        Panel(
            "GPU memory used",
            "Framebuffer used over framebuffer in total, per GPU.",
            (
                q(
                    "DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE)",
                    "{{Hostname}}/{{gpu}}",
                ),
            ),
            unit="percentunit",
        ),
        Panel(
            "GPU temperature",
            "DCGM_FI_DEV_GPU_TEMP of each GPU.",
            (q("DCGM_FI_DEV_GPU_TEMP", "{{Hostname}}/{{gpu}}"),),
            unit="celsius",
        ),
        Panel(
            "GPU power",
            "DCGM_FI_DEV_POWER_USAGE of each GPU.",
            (q("DCGM_FI_DEV_POWER_USAGE", "{{Hostname}}/{{gpu}}"),),
            unit="watt",
        ),
        Panel(
            "Last Xid",
            "The last Xid code of each GPU (0: none).",
            (q("max by (Hostname, gpu) (DCGM_FI_DEV_XID_ERRORS)", "{{Hostname}}/{{gpu}}"),),
            kind="table",
        ),
        Panel(
            "ECC errors",
            "Volatile and aggregate single- and double-bit ECC errors, per node.",
            (
                q("sum by (Hostname) (DCGM_FI_DEV_ECC_SBE_VOL_TOTAL)", "{{Hostname}} SBE vol"),
                q("sum by (Hostname) (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL)", "{{Hostname}} DBE vol"),
                q("sum by (Hostname) (DCGM_FI_DEV_ECC_SBE_AGG_TOTAL)", "{{Hostname}} SBE agg"),
                q("sum by (Hostname) (DCGM_FI_DEV_ECC_DBE_AGG_TOTAL)", "{{Hostname}} DBE agg"),
            ),
        ),
        Panel(
            "Row remapping",
            "Rows remapped (correctable, uncorrectable) and remap failures, per node.",
            (
                q(
                    "sum by (Hostname) (DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS)",
                    "{{Hostname}} correctable",
                ),
                q(
                    "sum by (Hostname) (DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS)",
                    "{{Hostname}} uncorrectable",
                ),
                q("sum by (Hostname) (DCGM_FI_DEV_ROW_REMAP_FAILURE)", "{{Hostname}} failures"),
            ),
        ),
        Panel(
            "PCIe replays and NVLink bandwidth",
            "PCIe replays per second and NVLink bandwidth, per GPU.",
            (
                q(
                    "rate(DCGM_FI_DEV_PCIE_REPLAY_COUNTER[5m])",
                    "{{Hostname}}/{{gpu}} PCIe replays",
                ),
                q("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "{{Hostname}}/{{gpu}} NVLink"),
            ),
        ),
        Panel(
            "Agent checks",
            "Each check's last duration, and the agents' checks by status.",
            (
                q("max by (check) (kiban_agent_check_seconds)", "{{check}} seconds"),
                q("sum by (check, status) (kiban_agent_check_status)", "{{check}} {{status}}"),
            ),
        ),
    ),
)

JOBS = Dashboard(
    uid="kiban-jobs",
    title="kiban / Jobs",
    description="What jobs do with their GPUs (labelled job, tenant and queue), and their flow.",
    panels=(
        Panel(
            "GPU utilization by job",
            "Mean utilization of the GPUs each job holds.",
            (
                q(
                    'avg by (job, tenant, queue) (DCGM_FI_DEV_GPU_UTIL{tenant!=""})',
                    "{{tenant}}/{{job}}",
                ),
            ),
            unit="percent",
        ),
        Panel(
            "GPU memory by job",
            "Framebuffer used by each job's GPUs, in MiB.",
            (
                q(
                    'sum by (job, tenant, queue) (DCGM_FI_DEV_FB_USED{tenant!=""})',
                    "{{tenant}}/{{job}}",
                ),
            ),
            unit="mbytes",
        ),
        Panel(
            "Idle GPUs by job",
            "GPUs of running jobs under the idle threshold for longer than the idle window.",
            (q("kiban_job_idle_gpus", "{{tenant}}/{{job}}"),),
            kind="table",
        ),
        Panel(
            "Finished jobs per minute",
            "Jobs that ended, by queue and end state.",
            (
                q(
                    "sum by (queue, state) (rate(kiban_finished_jobs_total[5m])) * 60",
                    "{{queue}} {{state}}",
                ),
            ),
        ),
        Panel(
            "Admission wait (p50)",
            "Median time from submission to admission, over every queue.",
            (
                q(
                    "histogram_quantile(0.5, sum by (le) "
                    "(rate(kiban_admission_wait_time_seconds_bucket[5m])))",
                    "p50",
                ),
            ),
            unit="s",
        ),
        Panel(
            "Jobs waiting and admitted",
            "Pending jobs, and admissions per minute, per queue.",
            (
                q("sum by (queue) (kiban_pending_jobs)", "{{queue}} pending"),
                q(
                    "sum by (queue) (increase(kiban_admitted_jobs_total[1m]))",
                    "{{queue}} admitted",
                ),
            ),
        ),
    ),
)

SERVING = Dashboard(
    uid="kiban-serving",
    title="kiban / Serving",
    description="Inference services: their model servers (kiban_model_*), per service.",
    panels=(
        Panel(
            "Requests per second",
            "Requests answered by the model servers, by service, route and status.",
            (
                q(
                    "sum by (service, route, status) (rate(kiban_model_requests_total[5m]))",
                    "{{service}} {{route}} {{status}}",
                ),
            ),
            unit="reqps",
        ),
        Panel(
            "Request latency",
            "Percentiles of the time to the response's last byte, per service.",
            (
                q(
                    "histogram_quantile(0.5, sum by (service, le) "
                    "(rate(kiban_model_request_duration_seconds_bucket[5m])))",
                    "{{service}} p50",
                ),
                q(
                    "histogram_quantile(0.99, sum by (service, le) "
                    "(rate(kiban_model_request_duration_seconds_bucket[5m])))",
                    "{{service}} p99",
                ),
            ),
            unit="s",
        ),
        Panel(
            "Requests in flight",
            "Requests being handled by each service's replicas now.",
            (q("sum by (service) (kiban_model_requests_in_flight)", "{{service}}"),),
        ),
        Panel(
            "Tokens",
            "Completion tokens per second (last pass), and prompt tokens per second.",
            (
                q("sum by (service) (kiban_model_tokens_per_second)", "{{service}} generated"),
                q(
                    "sum by (service) (rate(kiban_model_prompt_tokens_total[5m]))",
                    "{{service}} prompt",
                ),
            ),
        ),
        Panel(
            "Batch size",
            "Median requests per forward pass.",
            (
                q(
                    "histogram_quantile(0.5, sum by (service, le) "
                    "(rate(kiban_model_batch_size_bucket[5m])))",
                    "{{service}}",
                ),
            ),
        ),
        Panel(
            "Replicas up",
            "Model server replicas Prometheus scrapes, per service (the router serves no "
            "/metrics of its own: its traffic shows in `kiban describe service`).",
            (q('sum by (service) (up{kiban_component="model-server"})', "{{service}}"),),
        ),
    ),
)

DASHBOARDS = (CLUSTER, QUEUES, NODES, JOBS, SERVING)


def render_panel(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    return {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": {},
        "targets": [
            {
                "refId": chr(ord("A") + index),
                "datasource": DATASOURCE,
                "expr": query.expr,
                "legendFormat": query.legend,
                "instant": panel.kind == "table",
                "range": panel.kind != "table",
            }
            for index, query in enumerate(panel.queries)
        ],
    }


def render(dashboard: Dashboard) -> dict[str, Any]:
    """Grafana's dashboard JSON: panels placed left to right, a new row when one is full."""
    panels: list[dict[str, Any]] = []
    x = y = row_height = 0
    for panel_id, panel in enumerate(dashboard.panels, start=1):
        if x + panel.width > GRID_COLUMNS:
            x, y, row_height = 0, y + row_height, 0
        panels.append(render_panel(panel, panel_id, x, y))
        x += panel.width
        row_height = max(row_height, panel.height)
    return {
        "uid": dashboard.uid,
        "title": dashboard.title,
        "description": dashboard.description,
        "tags": ["kiban"],
        "editable": True,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "timezone": "browser",
        "annotations": {"list": []},
        "templating": {"list": []},
        "links": [],
        "panels": panels,
    }


def files() -> dict[Path, str]:
    return {
        DASHBOARDS_DIR / f"{dashboard.uid.removeprefix('kiban-')}.json": json.dumps(
            render(dashboard), indent=2
        )
        + "\n"
        for dashboard in DASHBOARDS
    }


def main(argv: list[str]) -> int:
    check = argv[1:] == ["--check"]
    stale = []
    for path, text in files().items():
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(path.name)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if stale:
        print(
            f"stale dashboards: {', '.join(stale)}; run python deploy/grafana/generate.py",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
