"""``/metrics`` and Prometheus's service discovery over a small cluster built through the
control loop: every control-plane metric with its labels and values, no token needed, and no
tenant data beyond names."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select

from kiban.executors.base import NodeInfo
from kiban.platform import Platform
from kiban.scheduler.reasons import ReasonCode
from kiban.services.policy import apply_policy
from kiban.store.models import Event, Job, Replica
from kiban.store.models_nodes import Node, NodeCondition, NodeReadingRow, RemediationAction
from kiban.store.models_serving import ServiceReplica, ServiceRevision, ServiceRow
from kiban.testing import FakeExecutor, ManualClock, manifest
from kiban.testing.platform_jobs import submit_to_platform

SECRET = "hunter2-not-for-prometheus"
WINDOW = 60.0

POLICY = {
    "cohorts": [{"name": "research"}],
    "queues": [
        {"name": "vision", "tenant": "vision", "cohort": "research", "quota": {"gpu": 4}},
        {"name": "speech", "tenant": "speech", "cohort": "research", "quota": {"gpu": 4}},
    ],
    "idleGpus": {"utilizationPercent": 5, "window": WINDOW},
}

# Every control-plane metric of the contract (i23-common.md), as the parser names families.
CONTROL_PLANE_FAMILIES = {
    "kiban_pending_jobs",
    "kiban_jobs_pending_past_forecast",
    "kiban_admission_wait_time_seconds",
    "kiban_admitted_jobs",
    "kiban_preempted_jobs",
    "kiban_finished_jobs",
    "kiban_quota_nominal_gpus",
    "kiban_quota_used_gpus",
    "kiban_quota_borrowed_gpus",
    "kiban_quota_lent_gpus",
    "kiban_tenant_decayed_usage_gpu_seconds",
    "kiban_tenant_fair_share",
    "kiban_scheduling_cycle_seconds",
    "kiban_forecast_horizon_seconds",
    "kiban_runtime_estimate_error_percent",
    "kiban_runtime_estimate_checked",
    "kiban_node_gpus",
    "kiban_node_gpus_allocated",
    "kiban_node_schedulable",
    "kiban_node_condition",
    "kiban_node_agent_report_age_seconds",
    "kiban_remediation_actions",
    "kiban_remediation_breaker_open",
    "kiban_remediation_nodes_cordoned",
    "kiban_job_idle_gpus",
    "kiban_idle_gpus_while_jobs_wait",
    "kiban_build_info",
    "kiban_audit_append_failures",
}


@pytest.fixture
def executor(clock: ManualClock) -> FakeExecutor:
    nodes = [NodeInfo(f"node-{i}", 4, 16000, 64 * 2**30, {}) for i in range(4)]
    return FakeExecutor(nodes, clock=clock)


Series = dict[str, dict[tuple[tuple[str, str], ...], float]]


def scrape(client: TestClient) -> tuple[Series, set[str], str]:
    """Sample name -> labels -> value, the families' names, and the text, scraped without a
    token."""
    answer = client.get("/metrics", headers={"Authorization": ""})
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain")
    series: Series = {}
    names = set()
    for family in text_string_to_metric_families(answer.text):
        names.add(family.name)
        for sample in family.samples:
            key = tuple(sorted(sample.labels.items()))
            assert key not in series.setdefault(sample.name, {}), f"{sample.name}{key} twice"
            series[sample.name][key] = sample.value
    return series, names, answer.text


def labels(**values: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(values.items()))


@dataclass
class Cluster:
    platform: Platform
    client: TestClient
    finished: str
    borrower: str
    waiting: str


def apply(platform: Platform) -> None:
    with platform.sessions() as session:
        apply_policy(session, POLICY, actor="test", at=platform.clock.now())
        session.commit()
    platform.policy_changed()


def idle_reading(node: str, at: float) -> NodeReadingRow:
    gpus = [{"index": i, "utilization_percent": 0.0} for i in range(4)]
    return NodeReadingRow(
        node=node, taken_at=at, reading={"node": node, "taken_at": at, "gpus": gpus}
    )


@pytest.fixture
def cluster(platform: Platform, api: TestClient, executor: FakeExecutor) -> Iterator[Cluster]:
    apply(platform)
    loop, clock = platform.loop, platform.clock
    # vision runs a small job to its end; speech borrows vision's idle quota; vision then waits
    finished = submit_to_platform(platform, manifest("small", queue="vision", gpu=1))
    for _ in range(3):  # admitted; seen holding its GPU; then 10 s of usage
        loop.run_once()
        clock.advance(10)
    executor.finish_all(finished)
    loop.run_once()
    secret = {"API_KEY": SECRET}
    borrower = submit_to_platform(
        platform, manifest("big", queue="speech", replicas=2, gpu=4, env=secret)
    )
    loop.run_once()
    clock.advance(30)
    waiting = submit_to_platform(
        platform, manifest("wait", queue="vision", replicas=2, gpu=4, env=secret)
    )
    loop.run_once()
    now = clock.now()
    with platform.sessions() as session:
        placed = sorted(
            set(session.scalars(select(Replica.node).where(Replica.job_id == borrower)))
        )
        for node in placed:
            session.merge(idle_reading(node, now))
        session.add_all(
            [
                NodeCondition(
                    node="node-0",
                    type="GpuEcc",
                    status="True",
                    reason="UncorrectableEcc",
                    message="2 DBE",
                    last_transition_time=now,
                    updated_at=now,
                ),
                NodeCondition(
                    node="node-0",
                    type="GpuXid",
                    status="False",
                    reason="NoXid",
                    message="",
                    last_transition_time=now,
                    updated_at=now,
                ),
                RemediationAction(
                    node="node-0",
                    action="cordon",
                    check="GpuEcc",
                    rule="ecc",
                    reading="2 DBE",
                    outcome="done",
                    at=now,
                ),
                RemediationAction(
                    node="node-1",
                    action="cordon",
                    check="GpuEcc",
                    rule="ecc",
                    reading="2 DBE",
                    outcome="suppressed",
                    at=now,
                ),
                Event(
                    object_kind="Job",
                    object_name=finished,
                    tenant="vision",
                    type="Normal",
                    reason="Preempted",
                    message="made room",
                    at=now,
                ),
            ]
        )
        free = sorted({f"node-{i}" for i in range(4)} - set(placed))
        nodes = {n.name: n for n in session.scalars(select(Node))}
        nodes[free[0]].cordoned, nodes[free[0]].cordon_source = True, "remediation"
        nodes["node-0"].agent_address, nodes["node-0"].agent_reported_at = "10.0.0.5:9400", now - 12
        for name in ("node-1", "node-2"):
            nodes[name].agent_address, nodes[name].agent_reported_at = "10.0.0.6:9400", now
        nodes["node-3"].agent_address = "unix:/run/kiban/agent.sock"
        session.commit()
    clock.advance(15)  # the loop looks at readings every 15 s: their idle spell starts
    loop.run_once()
    clock.advance(WINDOW)
    with platform.sessions() as session:
        for node in placed:
            session.merge(idle_reading(node, clock.now()))
        session.commit()
    loop.run_once()
    yield Cluster(platform, TestClient(api.app), finished, borrower, waiting)


def test_every_metric_of_the_contract_is_exported(cluster: Cluster) -> None:
    _, names, _ = scrape(cluster.client)
    assert names >= CONTROL_PLANE_FAMILIES, sorted(CONTROL_PLANE_FAMILIES - names)


def test_queues_quotas_and_fair_share(cluster: Cluster) -> None:
    series, _, _ = scrape(cluster.client)
    with cluster.platform.sessions() as session:
        waiting = session.get(Job, cluster.waiting)
        assert waiting is not None and waiting.state == "Pending"
        reason = waiting.reason_code
    assert reason in {r.value for r in ReasonCode}
    assert series["kiban_pending_jobs"] == {labels(queue="vision", reason=reason): 1}
    # every queue has a series, 0 where no job is late (a dashboard shows 0, not "no data")
    late = series["kiban_jobs_pending_past_forecast"]
    assert set(late) == {labels(queue="vision"), labels(queue="speech")}
    assert late[labels(queue="speech")] == 0
    assert series["kiban_admitted_jobs_total"] == {
        labels(queue="vision"): 1,
        labels(queue="speech"): 1,
    }
    assert series["kiban_finished_jobs_total"] == {labels(queue="vision", state="Succeeded"): 1}
    assert series["kiban_preempted_jobs_total"] == {labels(queue="vision", reason="Preempted"): 1}
    # both admissions were at once: every bucket holds them
    buckets = series["kiban_admission_wait_time_seconds_bucket"]
    assert buckets[labels(queue="speech", le="1.0")] == 1
    assert buckets[labels(queue="speech", le="+Inf")] == 1
    assert series["kiban_admission_wait_time_seconds_count"][labels(queue="speech")] == 1
    # speech uses 8 of its 4: vision's idle 4 are lent to it
    for name, vision, speech in (
        ("kiban_quota_nominal_gpus", 4, 4),
        ("kiban_quota_used_gpus", 0, 8),
        ("kiban_quota_borrowed_gpus", 0, 4),
        ("kiban_quota_lent_gpus", 4, 0),
    ):
        assert series[name] == {
            labels(queue="vision", flavor="default"): vision,
            labels(queue="speech", flavor="default"): speech,
        }, name
    usage = series["kiban_tenant_decayed_usage_gpu_seconds"]
    assert usage[labels(tenant="speech")] > usage[labels(tenant="vision")] > 0
    share = series["kiban_tenant_fair_share"]
    total = usage[labels(tenant="speech")] + usage[labels(tenant="vision")]
    # equal weights: a tenant's standing is its part of the usage over one half
    assert share[labels(tenant="speech")] == pytest.approx(
        usage[labels(tenant="speech")] / total * 2
    )
    assert share[labels(tenant="speech")] > 1 > share[labels(tenant="vision")]
    cycles = series["kiban_scheduling_cycle_seconds_count"][()]
    assert cycles >= 4  # each run_once above scheduled
    assert series["kiban_build_info"] == {labels(version=__import__("kiban").__version__): 1}


def test_nodes_conditions_remediation_and_idle_gpus(cluster: Cluster) -> None:
    series, _, _ = scrape(cluster.client)
    assert series["kiban_node_gpus"] == {labels(node=f"node-{i}"): 4 for i in range(4)}
    with cluster.platform.sessions() as session:
        held = {
            node: len(gpus)
            for node, gpus in session.execute(
                select(Replica.node, Replica.gpu_ids).where(Replica.active.is_(True))
            )
        }
        cordoned = session.scalars(select(Node.name).where(Node.cordoned.is_(True))).one()
        events = session.scalars(
            select(Event.message).where(
                Event.object_name == cluster.borrower, Event.reason == "GpusIdle"
            )
        ).all()
    assert series["kiban_node_gpus_allocated"] == {
        labels(node=f"node-{i}"): held.get(f"node-{i}", 0) for i in range(4)
    }
    assert series["kiban_node_schedulable"] == {
        labels(node=f"node-{i}"): 0 if f"node-{i}" == cordoned else 1 for i in range(4)
    }
    # one series per node and condition: its current status only
    assert series["kiban_node_condition"] == {
        labels(node="node-0", condition="GpuEcc", status="True"): 1,
        labels(node="node-0", condition="GpuXid", status="False"): 1,
    }
    ages = series["kiban_node_agent_report_age_seconds"]
    assert ages[labels(node="node-0")] == pytest.approx(12 + 15 + WINDOW)
    assert labels(node="node-3") not in ages  # its agent never reported
    assert series["kiban_remediation_actions_total"] == {
        labels(action="cordon", check="GpuEcc", outcome="done"): 1,
        labels(action="cordon", check="GpuEcc", outcome="suppressed"): 1,
    }
    assert series["kiban_remediation_breaker_open"] == {(): 1}
    assert series["kiban_remediation_nodes_cordoned"] == {(): 1}
    # the borrower's 8 GPUs read 0 % for longer than the window: idle, and one event
    assert series["kiban_job_idle_gpus"] == {
        labels(job=cluster.borrower, tenant="speech", queue="speech"): 8
    }
    assert len(events) == 1
    # a job waits: the free GPUs of schedulable nodes are idle meanwhile
    free = sum(4 - held.get(f"node-{i}", 0) for i in range(4) if f"node-{i}" != cordoned)
    assert series["kiban_idle_gpus_while_jobs_wait"] == {(): free}


def test_service_discovery_lists_what_prometheus_can_scrape(cluster: Cluster) -> None:
    platform = cluster.platform
    with platform.sessions() as session:
        service = ServiceRow(
            tenant="vision", name="chat", document={}, spec={}, created_at=0, updated_at=0
        )
        session.add(service)
        session.flush()
        revision = ServiceRevision(
            service_id=service.id, number=2, template_key="k", spec={}, state="Ready", created_at=0
        )
        session.add(revision)
        session.flush()
        for index, job in enumerate((cluster.waiting, cluster.finished)):
            session.add(
                ServiceReplica(
                    job_id=job, service_id=service.id, revision_id=revision.id, index=index
                )
            )
        session.commit()
    platform.services.addresses = {cluster.waiting: "10.1.0.7:8000", cluster.finished: "unix:/s"}
    platform.services.ports = {cluster.waiting: 8000, cluster.finished: 8123}
    model_servers = {cluster.waiting: "10.1.0.7:8000", cluster.finished: "127.0.0.1:8123"}
    answer = cluster.client.get(
        "/api/v1/discovery/prometheus", headers={"Authorization": "", "Host": "kiban.example:8470"}
    )
    assert answer.status_code == 200, answer.text
    groups = answer.json()
    assert all(set(g) == {"targets", "labels"} for g in groups)
    assert all(isinstance(t, str) for g in groups for t in g["targets"])
    assert groups == [
        {
            "targets": ["kiban.example:8470"],
            "labels": {
                "kiban_component": "control-plane",
                "__metrics_path__": "/metrics",
                "__scheme__": "http",
            },
        },
        {
            "targets": ["10.0.0.5:9400"],
            "labels": {
                "kiban_component": "node-agent",
                "__metrics_path__": "/metrics",
                "node": "node-0",
            },
        },
        {  # one agent serving two nodes is one target
            "targets": ["10.0.0.6:9400"],
            "labels": {"kiban_component": "node-agent", "__metrics_path__": "/metrics"},
        },
    ] + [  # the replica on a Unix socket at its loopback port
        {
            "targets": [model_servers[job]],
            "labels": {
                "kiban_component": "model-server",
                "service": "chat",
                "tenant": "vision",
                "revision": "chat-00002",
                "__metrics_path__": "/metrics",
            },
        }
        for job in sorted(model_servers)
    ]


def test_no_tenant_data_beyond_names(cluster: Cluster, admin_token: str) -> None:
    _, _, text = scrape(cluster.client)
    discovery = cluster.client.get("/api/v1/discovery/prometheus").text
    for leak in (SECRET, admin_token, "API_KEY", "train.py"):
        assert leak not in text
        assert leak not in discovery
    # the labels of the series are the names an admin expects, nothing else
    allowed = {"queue", "reason", "state", "flavor", "tenant", "node", "condition", "status"}
    allowed |= {"action", "check", "outcome", "job", "version", "le"}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            assert set(sample.labels) <= allowed, (sample.name, sample.labels)
