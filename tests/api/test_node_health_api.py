"""``GET /api/v1/nodes/{name}/health`` and the conditions in ``GET /api/v1/nodes``: what a node's
health checks found, what changed and what was done about it, over a store filled here (the
agent's reports and the remediation engine write it in production)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient

from kiban.api.app import create_app
from kiban.health.conditions import CheckType, ConditionStatus
from kiban.health.readings import GpuReading, NodeReading, XidEvent
from kiban.platform import Platform
from kiban.services.node_health_views import AGENT_TIMEOUT_S, HISTORY_LIMIT, OTHER_TENANTS_JOB
from kiban.testing import ManualClock, manifest
from kiban.testing.node_health_rows import NodeHealthRows

ECC, XID, PCIE = CheckType.GPU_ECC, CheckType.GPU_XID, CheckType.GPU_PCIE
TRUE, FALSE, UNKNOWN = ConditionStatus.TRUE, ConditionStatus.FALSE, ConditionStatus.UNKNOWN


def reading(node: str, at: float) -> NodeReading:
    gpu = GpuReading(
        index=0,
        uuid="GPU-0",
        model="NVIDIA H100 80GB HBM3",
        ecc_volatile_uncorrectable=2,
        pcie_link_gen=5,
        pcie_link_width=16,
        xids=(XidEvent(code=48, at=at - 1),),
        utilization_percent=97.0,
        temperature_c=61.0,
    )
    return NodeReading(
        node=node, taken_at=at, nvml_available=True, driver_version="550", gpus=(gpu,)
    )


@pytest.fixture
def sick(platform: Platform, clock: ManualClock) -> NodeHealthRows:
    """node-0: GpuPcie healthy, then GpuEcc failing and cordoned for it, GpuXid unknown."""
    t = clock.now()
    rows = NodeHealthRows(platform, "node-0")
    rows.condition(PCIE, FALSE, at=t - 300, streak=9, updated_at=t - 5)
    rows.condition(ECC, FALSE, at=t - 300)
    rows.condition(ECC, TRUE, at=t - 60, reason="UncorrectableEcc", message="GPU 0: 2 DBE")
    rows.condition(XID, UNKNOWN, at=t - 30, reason="NvmlUnavailable", message="no NVML")
    rows.action("cordon", ECC, at=t - 59, reading="GPU 0: 2 DBE", detail="cordoned")
    rows.action("drain", ECC, at=t - 58, outcome="failed", detail="requeue failed")
    rows.reading(reading("node-0", t - 5)).agent("10.0.0.7:9400", reported_at=t - 5)
    return rows


def test_a_nodes_health_has_its_conditions_history_actions_reading_and_agent(
    api: TestClient, sick: NodeHealthRows, clock: ManualClock
) -> None:
    t = clock.now()
    answer = api.get("/api/v1/nodes/node-0/health")
    assert answer.status_code == 200, answer.text
    health = answer.json()
    assert health["node"] == "node-0"
    assert health["conditions"] == [  # one per check, by type
        {
            "type": "GpuEcc",
            "status": "True",
            "reason": "UncorrectableEcc",
            "message": "GPU 0: 2 DBE",
            "lastTransitionTime": t - 60,
            "streak": 1,
            "updatedAt": t - 60,
        },
        {
            "type": "GpuPcie",
            "status": "False",
            "reason": "NoProblem",
            "message": "",
            "lastTransitionTime": t - 300,
            "streak": 9,
            "updatedAt": t - 5,
        },
        {
            "type": "GpuXid",
            "status": "Unknown",
            "reason": "NvmlUnavailable",
            "message": "no NVML",
            "lastTransitionTime": t - 30,
            "streak": 1,
            "updatedAt": t - 30,
        },
    ]
    # newest first
    assert [(h["type"], h["status"], h["at"]) for h in health["history"]] == [
        ("GpuXid", "Unknown", t - 30),
        ("GpuEcc", "True", t - 60),
        ("GpuEcc", "False", t - 300),
        ("GpuPcie", "False", t - 300),
    ]
    assert health["history"][1] == {
        "type": "GpuEcc",
        "status": "True",
        "reason": "UncorrectableEcc",
        "message": "GPU 0: 2 DBE",
        "at": t - 60,
    }
    assert health["actions"] == [
        {
            "action": "drain",
            "check": "GpuEcc",
            "rule": "rules[0]",
            "reading": "",
            "outcome": "failed",
            "detail": "requeue failed",
            "at": t - 58,
        },
        {
            "action": "cordon",
            "check": "GpuEcc",
            "rule": "rules[0]",
            "reading": "GPU 0: 2 DBE",
            "outcome": "done",
            "detail": "cordoned",
            "at": t - 59,
        },
    ]
    assert NodeReading.model_validate(health["reading"]) == reading("node-0", t - 5)
    assert health["agent"] == {"address": "10.0.0.7:9400", "reportedAt": t - 5, "stale": False}


def test_an_agent_is_stale_once_it_has_not_reported_within_the_timeout(
    api: TestClient, sick: NodeHealthRows, clock: ManualClock
) -> None:
    clock.advance(AGENT_TIMEOUT_S - 5)  # its last report is AGENT_TIMEOUT_S old: not yet
    assert api.get("/api/v1/nodes/node-0/health").json()["agent"]["stale"] is False
    clock.advance(1)
    assert api.get("/api/v1/nodes/node-0/health").json()["agent"]["stale"] is True


def test_a_node_no_agent_reported_for_has_no_reading_and_is_not_stale(api: TestClient) -> None:
    health = api.get("/api/v1/nodes/node-1/health").json()
    assert (health["conditions"], health["history"], health["actions"]) == ([], [], [])
    assert health["reading"] is None
    assert health["agent"] == {"address": "", "reportedAt": None, "stale": False}


def test_history_and_actions_are_the_newest_hundred(
    api: TestClient, platform: Platform, clock: ManualClock
) -> None:
    rows = NodeHealthRows(platform, "node-2")
    for i in range(HISTORY_LIMIT + 5):
        status = TRUE if i % 2 else FALSE
        rows.condition(ECC, status, at=float(i)).action("cordon", ECC, at=float(i))
    health = api.get("/api/v1/nodes/node-2/health").json()
    newest_first = [float(i) for i in reversed(range(5, HISTORY_LIMIT + 5))]
    assert [h["at"] for h in health["history"]] == newest_first
    assert [a["at"] for a in health["actions"]] == newest_first


def test_an_unknown_node_is_404_naming_it(api: TestClient) -> None:
    answer = api.get("/api/v1/nodes/node-9/health")
    assert answer.status_code == 404
    assert answer.json()["error"]["message"] == "node node-9 not found"


def test_the_node_list_has_conditions_that_are_not_false_and_who_cordoned(
    api: TestClient, sick: NodeHealthRows, platform: Platform
) -> None:
    NodeHealthRows(platform, "node-2").cordoned_by("remediation")
    assert api.post("/api/v1/nodes/node-1/cordon").status_code == 200
    listed = {n["name"]: n for n in api.get("/api/v1/nodes").json()}
    assert listed["node-0"]["conditions"] == [
        {"type": "GpuEcc", "status": "True", "reason": "UncorrectableEcc"},
        {"type": "GpuXid", "status": "Unknown", "reason": "NvmlUnavailable"},
    ]
    assert listed["node-1"]["conditions"] == []
    assert {name: n["cordonSource"] for name, n in listed.items()} == {
        "node-0": "",
        "node-1": "admin",
        "node-2": "remediation",
    }
    # A cordon's answer is the node as listed, its conditions included.
    cordoned = api.post("/api/v1/nodes/node-0/cordon").json()
    assert (cordoned["cordonSource"], cordoned["conditions"]) == (
        "admin",
        listed["node-0"]["conditions"],
    )


@dataclass
class Tenants:
    member: TestClient  # alice, of tenant vision
    own_job: str  # vision's
    other_job: str  # speech's


@pytest.fixture
def tenants(api: TestClient, platform: Platform) -> Iterator[Tenants]:
    jobs = {}
    for tenant in ("vision", "speech"):
        assert api.post("/api/v1/tenants", json={"name": tenant}).status_code == 201
        queue = {"name": f"{tenant}-q", "tenant": tenant, "quota": {"gpu": 2}}
        assert api.post("/api/v1/queues", json=queue).status_code == 201
        answer = api.post("/api/v1/jobs", json=manifest(f"{tenant}-train", queue=f"{tenant}-q"))
        assert answer.status_code == 201, answer.text
        jobs[tenant] = answer.json()["id"]
    token = api.post("/api/v1/tenants/vision/tokens", json={"name": "alice"}).json()["token"]
    with TestClient(create_app(platform), headers={"Authorization": f"Bearer {token}"}) as alice:
        yield Tenants(alice, jobs["vision"], jobs["speech"])


def test_a_member_sees_node_health_but_not_another_tenants_jobs_in_actions(
    api: TestClient, tenants: Tenants, sick: NodeHealthRows, clock: ManualClock
) -> None:
    detail = f"requeued {tenants.own_job}, {tenants.other_job} (was on node-0-{tenants.other_job})"
    sick.action("drain", ECC, at=clock.now(), detail=detail)

    as_member = tenants.member.get("/api/v1/nodes/node-0/health")
    assert as_member.status_code == 200, as_member.text
    shown = as_member.json()["actions"][0]["detail"]
    assert shown == (
        f"requeued {tenants.own_job}, {OTHER_TENANTS_JOB} (was on node-0-{OTHER_TENANTS_JOB})"
    )
    assert tenants.other_job not in as_member.text
    as_admin = api.get("/api/v1/nodes/node-0/health").json()
    assert as_admin["actions"][0]["detail"] == detail
    # The rest is the same for both: nodes are cluster-wide.
    assert as_member.json()["conditions"] == as_admin["conditions"]
    assert as_member.json()["reading"] == as_admin["reading"]
    member_nodes = tenants.member.get("/api/v1/nodes").json()
    assert member_nodes == api.get("/api/v1/nodes").json()
