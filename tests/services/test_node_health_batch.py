"""``POST /api/v1/nodes/health``: an agent's reports on several nodes in one body, taken all or
none in one transaction, stored exactly as the same reports posted one by one, the rules
deciding once for the batch (the circuit breaker bounding it as it bounds reports one by one).

A platform with the fake executor (3 nodes of 2 GPUs) and a manual clock.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select

from kiban.api.app import create_app
from kiban.executors.base import NodeInfo
from kiban.health.conditions import CheckType
from kiban.health.report import MAX_BATCH_REPORTS
from kiban.platform import Platform, build_platform
from kiban.store.models_nodes import Node, NodeCondition, NodeConditionChange, RemediationAction
from kiban.testing import FakeExecutor, ManualClock, manifest
from kiban.testing.health_reports import health_report
from kiban.testing.platform_jobs import submit_to_platform

ECC = {CheckType.GPU_ECC: "GPU 0: 2 volatile uncorrectable ECC errors"}
NODES = ("node-0", "node-1", "node-2")


def batch(at: float, nodes: tuple[str, ...] = NODES, faults: Any = None) -> dict[str, Any]:
    reports = [health_report(n, at, faults, interval_s=5).model_dump(mode="json") for n in nodes]
    return {"reports": reports}


def stored(platform: Platform) -> list[tuple[Any, ...]]:
    """Every node's conditions and their history, as the store holds them."""
    with platform.sessions() as session:
        conditions = session.execute(
            select(
                NodeCondition.node,
                NodeCondition.type,
                NodeCondition.status,
                NodeCondition.streak,
                NodeCondition.updated_at,
            ).order_by(NodeCondition.node, NodeCondition.type)
        ).all()
        changes = session.execute(
            select(
                NodeConditionChange.node, NodeConditionChange.type, NodeConditionChange.at
            ).order_by(NodeConditionChange.node, NodeConditionChange.type, NodeConditionChange.at)
        ).all()
        reported = session.execute(
            select(Node.name, Node.agent_reported_at).order_by(Node.name)
        ).all()
    return [tuple(row) for row in [*conditions, *changes, *reported]]


def cordoned(platform: Platform) -> list[str]:
    with platform.sessions() as session:
        return list(session.scalars(select(Node.name).where(Node.cordoned).order_by(Node.name)))


def actions(platform: Platform) -> list[tuple[str, str, str]]:
    with platform.sessions() as session:
        rows = session.scalars(select(RemediationAction).order_by(RemediationAction.id))
        return [(a.node, a.action, a.outcome) for a in rows]


def test_a_batch_is_stored_as_the_same_reports_one_by_one(
    api: TestClient, platform: Platform, clock: ManualClock, tmp_path: Path
) -> None:
    job_id = submit_to_platform(platform, manifest(replicas=1, gpu=2))
    platform.loop.run_once()
    start = clock.now()
    steps = (None, None, ECC)  # a first report, one like it, one with a fault
    for faults in steps:
        clock.advance(5)
        answer = api.post("/api/v1/nodes/health", json=batch(clock.now(), faults=faults))
        assert answer.status_code == 200, answer.text
        replies = answer.json()["replies"]
        assert set(replies) == set(NODES)
        assert all(reply["interval_s"] == 5 for reply in replies.values())
        held = sorted([a["job"] for a in reply["allocations"]] for reply in replies.values())
        assert held == [[], [], [job_id, job_id]]  # its node's two GPUs, each node its own
    # The same reports one by one, to a control plane of the same nodes: the same rows.
    other_clock = ManualClock(start)
    nodes = [NodeInfo(n, 2, 8000, 32 * 2**30, {"kubernetes.io/hostname": n}) for n in NODES]
    other = build_platform(
        home=tmp_path / "other",
        db_url=None,  # SQLite in its home
        executor=FakeExecutor(nodes, clock=other_clock),
        clock=other_clock,
    )
    try:
        token = (other.home / "token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}"}
        with TestClient(create_app(other), headers=headers) as one_by_one:
            for faults in steps:
                other_clock.advance(5)
                for node in NODES:
                    report = health_report(node, other_clock.now(), faults, interval_s=5)
                    body = report.model_dump(mode="json")
                    posted = one_by_one.post(f"/api/v1/nodes/{node}/health", json=body)
                    assert posted.status_code == 200, posted.text
        assert stored(platform) == stored(other)
    finally:
        other.close()
    assert len(stored(platform)) > len(NODES)  # conditions and history, not only the nodes


def test_one_bad_report_refuses_the_batch_naming_its_index_and_nothing_is_taken(
    api: TestClient, platform: Platform, clock: ManualClock
) -> None:
    body = batch(clock.now(), ("node-0", "node-9", "node-1"))
    answer = api.post("/api/v1/nodes/health", json=body)
    assert answer.status_code == 422, answer.text
    assert "reports[1].reading.node" in answer.text and "node-9" in answer.text
    twice = api.post(
        "/api/v1/nodes/health", json=batch(clock.now(), ("node-0", "node-1", "node-0"))
    )
    assert twice.status_code == 422
    assert "reports[2].reading.node" in twice.text and "reports[0]" in twice.text
    assert stored(platform) == [(n, None) for n in NODES]  # no condition, no report taken


def test_a_batch_is_bounded_and_not_empty(api: TestClient, clock: ManualClock) -> None:
    one = batch(clock.now(), ("node-0",))["reports"][0]
    for reports in ([], [one] * (MAX_BATCH_REPORTS + 1)):
        answer = api.post("/api/v1/nodes/health", json={"reports": reports})
        assert answer.status_code == 422, answer.text
        assert "reports" in answer.text
    nonsense = api.post("/api/v1/nodes/health", json={"reports": [{**one, "interval_s": -1}]})
    assert nonsense.status_code == 422 and "interval_s" in nonsense.text


def test_the_rules_decide_once_for_the_batch_and_the_breaker_bounds_it(
    api: TestClient, platform: Platform, clock: ManualClock
) -> None:
    policy = {"health": {"circuitBreaker": {"maxNodes": 1, "windowSeconds": 600}}}
    assert api.put("/api/v1/policy", json=policy).status_code == 200
    answer = api.post("/api/v1/nodes/health", json=batch(clock.now(), faults=ECC))
    assert answer.status_code == 200, answer.text
    assert cordoned(platform) == ["node-0"]
    assert actions(platform) == [
        ("node-0", "drain", "pending"),
        ("node-1", "drain", "suppressed"),
        ("node-2", "drain", "suppressed"),
    ]


def test_only_an_admin_reports_a_batch(
    api: TestClient, platform: Platform, clock: ManualClock
) -> None:
    answer = api.post(
        "/api/v1/nodes/health",
        json=batch(clock.now()),
        headers={"Authorization": "Bearer nope"},
    )
    assert answer.status_code == 401
    assert stored(platform) == [(n, None) for n in NODES]
