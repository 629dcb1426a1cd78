"""Agents' reports through the API, and remediation applied to the store, the jobs and the world.

A platform with the fake executor (3 nodes of 2 GPUs) and a manual clock; the control loop is
run pass by pass.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from kiban.health.conditions import CheckType, ConditionStatus
from kiban.platform import Platform
from kiban.services import nodes
from kiban.services.auth import Principal
from kiban.store.models import Event, Job, Replica
from kiban.store.models_nodes import (
    Node,
    NodeCondition,
    NodeConditionChange,
    NodeReadingRow,
    RemediationAction,
)
from kiban.testing import FakeExecutor, ManualClock, manifest
from kiban.testing.health_reports import health_report
from kiban.testing.platform_jobs import submit_to_platform

ADMIN = Principal(name="admin", tenant=None, is_admin=True)
ECC = {CheckType.GPU_ECC: "GPU 0: 2 volatile uncorrectable ECC errors"}


def post(api: TestClient, node: str, at: float, faults: Any = None, **kw: Any) -> Any:
    report = health_report(node, at, faults, **kw)
    return api.post(f"/api/v1/nodes/{node}/health", json=report.model_dump(mode="json"))


def set_health_policy(api: TestClient, health: dict[str, Any]) -> None:
    response = api.put("/api/v1/policy", json={"health": health})
    assert response.status_code == 200, response.text


def conditions(platform: Platform, node: str) -> dict[str, NodeCondition]:
    with platform.sessions() as session:
        rows = session.scalars(select(NodeCondition).where(NodeCondition.node == node))
        return {row.type: row for row in rows}


def actions(platform: Platform, node: str | None = None) -> list[tuple[str, str, str, str]]:
    with platform.sessions() as session:
        query = select(RemediationAction).order_by(RemediationAction.id)
        if node is not None:
            query = query.where(RemediationAction.node == node)
        return [(a.node, a.action, a.check, a.outcome) for a in session.scalars(query)]


def node_row(platform: Platform, name: str) -> Node:
    with platform.sessions() as session:
        return session.get_one(Node, name)


def node_events(platform: Platform, name: str) -> list[tuple[str, str]]:
    with platform.sessions() as session:
        query = select(Event).where(Event.object_kind == "Node", Event.object_name == name)
        return [(e.reason, e.message) for e in session.scalars(query.order_by(Event.id))]


def job_row(platform: Platform, job_id: str) -> Job:
    with platform.sessions() as session:
        return session.get_one(Job, job_id)


def job_nodes(platform: Platform, job_id: str) -> set[str]:
    with platform.sessions() as session:
        query = select(Replica.node).where(Replica.job_id == job_id, Replica.active.is_(True))
        return set(session.scalars(query))


# -- ingest ------------------------------------------------------------------------------------


def test_report_stores_conditions_streaks_history_reading_and_agent(
    api: TestClient, platform: Platform, clock: ManualClock
) -> None:
    t0 = clock.now()
    assert post(api, "node-0", t0, agent_address="10.0.0.1:9400").status_code == 200
    clock.advance(30)
    assert post(api, "node-0", clock.now(), agent_address="10.0.0.1:9400").status_code == 200
    first = conditions(platform, "node-0")
    assert set(first) == {c.value for c in CheckType}
    ecc = first["GpuEcc"]
    assert (ecc.status, ecc.streak, ecc.last_transition_time) == ("False", 2, t0)

    clock.advance(30)
    t2 = clock.now()
    thermal = {CheckType.GPU_THERMAL: "GPU 1 thermal throttling"}
    post(api, "node-0", t2, thermal, agent_address="10.0.0.1:9400")
    now = conditions(platform, "node-0")
    assert (now["GpuThermal"].status, now["GpuThermal"].streak) == ("True", 1)
    assert now["GpuThermal"].last_transition_time == t2
    assert (now["GpuEcc"].streak, now["GpuEcc"].last_transition_time) == (3, t0)

    with platform.sessions() as session:
        history = session.scalars(
            select(NodeConditionChange).where(NodeConditionChange.type == "GpuThermal")
        ).all()
        assert [(h.status, h.at) for h in history] == [("False", t0), ("True", t2)]
        reading = session.get_one(NodeReadingRow, "node-0")
        assert (reading.taken_at, reading.reading["node"]) == (t2, "node-0")
    node = node_row(platform, "node-0")
    assert (node.agent_address, node.agent_reported_at) == ("10.0.0.1:9400", t2)
    # A thermal warning is recorded, and acted on by nothing (its default rule is none).
    assert actions(platform, "node-0") == [("node-0", "none", "GpuThermal", "done")]
    assert not node.cordoned


def test_transition_time_never_later_than_the_control_plane_saw_it(
    api: TestClient, platform: Platform, clock: ManualClock
) -> None:
    post(api, "node-0", clock.now() + 500)  # an agent whose clock runs ahead
    assert conditions(platform, "node-0")["GpuEcc"].last_transition_time == clock.now()


def test_report_for_an_unknown_node_or_another_node_is_refused(
    api: TestClient, platform: Platform, clock: ManualClock
) -> None:
    missing = post(api, "node-9", clock.now())
    assert missing.status_code == 404
    assert "node-9" in missing.text
    report = health_report("node-1", clock.now()).model_dump(mode="json")
    other = api.post("/api/v1/nodes/node-0/health", json=report)
    assert other.status_code == 422
    assert "reading.node" in other.text
    assert conditions(platform, "node-0") == {}


def test_only_an_admin_reports(api: TestClient, platform: Platform, clock: ManualClock) -> None:
    report = health_report("node-0", clock.now()).model_dump(mode="json")
    response = api.post(
        "/api/v1/nodes/node-0/health", json=report, headers={"Authorization": "Bearer nope"}
    )
    assert response.status_code == 401


def test_reply_names_the_job_holding_each_gpu(
    api: TestClient, platform: Platform, clock: ManualClock
) -> None:
    job_id = submit_to_platform(platform, manifest(replicas=1, gpu=2))
    platform.loop.run_once()
    (node,) = job_nodes(platform, job_id)
    reply = post(api, node, clock.now()).json()
    assert sorted(a["gpu"] for a in reply["allocations"]) == [0, 1]
    assert {(a["job"], a["tenant"], a["queue"]) for a in reply["allocations"]} == {
        (job_id, "default", "default")
    }
    assert reply["interval_s"] == 30.0


# -- drain -------------------------------------------------------------------------------------


def test_ecc_fault_drains_the_node_and_the_job_resumes_elsewhere_keeping_its_backoff(
    api: TestClient, platform: Platform, executor: FakeExecutor, clock: ManualClock
) -> None:
    job_id = submit_to_platform(
        platform, manifest(replicas=2, gpu=2, restartPolicy="OnFailure", backoffLimit=1)
    )
    platform.loop.run_once()
    before = job_row(platform, job_id)
    assert before.state == "Running"
    bad = sorted(job_nodes(platform, job_id))[0]

    clock.advance(5)
    assert post(api, bad, clock.now(), ECC).status_code == 200
    node = node_row(platform, bad)
    assert (node.cordoned, node.cordon_source) == (True, "remediation")
    assert actions(platform, bad) == [(bad, "drain", "GpuEcc", "pending")]

    platform.loop.run_once()  # the drain: the job stops to return to its queue
    assert job_row(platform, job_id).state == "Stopping"
    assert actions(platform, bad) == [(bad, "drain", "GpuEcc", "done")]
    platform.loop.run_once()  # its replicas are gone: back in its queue, then placed again
    platform.loop.run_once()
    after = job_row(platform, job_id)
    assert after.state == "Running"
    assert after.submitted_at == before.submitted_at
    assert after.failed_attempts == 0  # the node's fault spends none of its backoffLimit
    assert after.attempt == 2
    assert bad not in job_nodes(platform, job_id)
    messages = [m for reason, m in node_events(platform, bad) if reason == "Remediation"]
    assert any("rule gpu-ecc" in m and "GpuEcc" in m and "uncorrectable" in m for m in messages)

    # The same fault reported again acts no more.
    clock.advance(5)
    post(api, bad, clock.now(), ECC)
    assert len(actions(platform, bad)) == 1


def test_a_drain_cut_short_by_a_restart_is_finished_by_the_next_control_plane(
    api: TestClient, platform: Platform, clock: ManualClock
) -> None:
    job_id = submit_to_platform(platform, manifest(replicas=1, gpu=2))
    platform.loop.run_once()
    (bad,) = job_nodes(platform, job_id)
    # The drain is recorded (cordon committed, action pending), and the control plane dies
    # before its loop runs: a new loop over the same store finishes it.
    with platform.sessions() as session:
        from kiban.services import node_health, remediation

        node_health.ingest(session, bad, health_report(bad, clock.now(), ECC), clock.now())
        session.commit()
        remediation.remediate(session, platform.policy.health, [bad], clock.now())
    assert actions(platform, bad) == [(bad, "drain", "GpuEcc", "pending")]
    from kiban.control.loop import ControlLoop

    fresh = ControlLoop(platform.sessions, platform.executor, clock=clock)
    fresh.recover()
    fresh.run_once()
    fresh.run_once()
    assert actions(platform, bad) == [(bad, "drain", "GpuEcc", "done")]
    assert job_row(platform, job_id).state in ("Pending", "Running")
    assert bad not in job_nodes(platform, job_id)


def test_pending_drains_are_read_when_one_is_recorded_not_on_every_pass(
    api: TestClient, platform: Platform, clock: ManualClock
) -> None:
    from kiban.services import node_health, remediation
    from kiban.services.health_pass import DRAIN_SWEEP_S

    job_id = submit_to_platform(platform, manifest(replicas=1, gpu=2))
    platform.loop.run_once()
    (bad,) = job_nodes(platform, job_id)
    # Recorded behind the loop's back (no report through the API tells it): the passes that
    # follow do not read the store for drains until the sweep comes round.
    with platform.sessions() as session:
        node_health.ingest(session, bad, health_report(bad, clock.now(), ECC), clock.now())
        session.commit()
        remediation.remediate(session, platform.policy.health, [bad], clock.now())
    clock.advance(1)
    platform.loop.run_once()
    assert actions(platform, bad) == [(bad, "drain", "GpuEcc", "pending")]
    clock.advance(DRAIN_SWEEP_S)
    platform.loop.run_once()
    assert actions(platform, bad) == [(bad, "drain", "GpuEcc", "done")]
    assert job_row(platform, job_id).state == "Stopping"


# -- circuit breaker ---------------------------------------------------------------------------


def test_breaker_bounds_a_burst_and_says_so_once(
    api: TestClient, platform: Platform, clock: ManualClock
) -> None:
    set_health_policy(api, {"circuitBreaker": {"maxNodes": 1, "windowSeconds": 600}})
    for name in ("node-0", "node-1", "node-2"):
        post(api, name, clock.now(), ECC)
    cordoned = [n for n in ("node-0", "node-1", "node-2") if node_row(platform, n).cordoned]
    assert cordoned == ["node-0"]
    assert actions(platform) == [
        ("node-0", "drain", "GpuEcc", "pending"),
        ("node-1", "drain", "GpuEcc", "suppressed"),
        ("node-2", "drain", "GpuEcc", "suppressed"),
    ]
    suppressed = [m for r, m in node_events(platform, "node-1") if r == "RemediationSuppressed"]
    assert len(suppressed) == 1 and "circuit breaker open" in suppressed[0]
    # Reported again while the breaker is open: no new action, no new event.
    clock.advance(30)
    post(api, "node-1", clock.now(), ECC)
    assert len(actions(platform, "node-1")) == 1
    # Once the window has passed, the suppressed fault is acted on.
    clock.advance(600)
    post(api, "node-1", clock.now(), ECC)
    assert actions(platform, "node-1")[-1] == ("node-1", "drain", "GpuEcc", "pending")
    assert node_row(platform, "node-1").cordon_source == "remediation"


# -- return to service -------------------------------------------------------------------------


def test_node_returns_after_k_healthy_checks_and_flapping_needs_more(
    api: TestClient, platform: Platform, clock: ManualClock
) -> None:
    set_health_policy(
        api,
        {
            "returnToService": {"healthyChecks": 2},
            "flapDamping": {"windowSeconds": 3600, "factor": 3},
        },
    )

    def report(faults: Any = None) -> None:
        clock.advance(30)
        assert post(api, "node-0", clock.now(), faults).status_code == 200

    report(ECC)
    assert node_row(platform, "node-0").cordoned
    report()
    assert node_row(platform, "node-0").cordoned  # one healthy check of two
    report()
    assert not node_row(platform, "node-0").cordoned
    assert actions(platform, "node-0")[-1] == ("node-0", "uncordon", "GpuEcc", "done")

    report(ECC)  # fails again within the damping window: 2 x 3 healthy checks now
    for _ in range(5):
        report()
        assert node_row(platform, "node-0").cordoned
    report()
    assert not node_row(platform, "node-0").cordoned


def test_an_admin_cordon_is_never_lifted_by_remediation(
    api: TestClient, platform: Platform, clock: ManualClock
) -> None:
    with platform.sessions() as session:
        nodes.cordon(session, ADMIN, "node-0", clock.now())
        session.commit()
    post(api, "node-0", clock.now(), {CheckType.GPU_PCIE: "GPU 0 PCIe x8 of x16"})
    for _ in range(10):
        clock.advance(30)
        post(api, "node-0", clock.now())
    node = node_row(platform, "node-0")
    assert (node.cordoned, node.cordon_source) == (True, "admin")
    assert [a[1] for a in actions(platform, "node-0")] == ["none"]  # nothing to do


# -- stale agents ------------------------------------------------------------------------------


def test_silent_agent_makes_conditions_unknown_and_a_node_without_agent_is_left(
    api: TestClient, platform: Platform, clock: ManualClock
) -> None:
    post(api, "node-0", clock.now())
    clock.advance(89)
    platform.loop.run_once()
    assert conditions(platform, "node-0")["GpuEcc"].status == "False"
    clock.advance(2)
    platform.loop.run_once()
    after = conditions(platform, "node-0")
    assert {c.status for c in after.values()} == {"Unknown"}
    assert {c.reason for c in after.values()} == {"AgentNotReporting"}
    assert conditions(platform, "node-1") == {}  # no agent ever: nothing to say
    assert not node_row(platform, "node-0").cordoned  # Unknown acts on no default rule
    # Reporting again brings it back.
    post(api, "node-0", clock.now())
    assert conditions(platform, "node-0")["GpuEcc"].status == "False"


def test_unknown_rule_acts_on_a_silent_agent(
    api: TestClient, platform: Platform, clock: ManualClock
) -> None:
    rule = {"name": "silent", "condition": "GpuBus", "status": "Unknown", "action": "cordon"}
    set_health_policy(api, {"rules": [rule], "agentTimeoutSeconds": 60})
    post(api, "node-0", clock.now())
    clock.advance(61)
    platform.loop.run_once()
    node = node_row(platform, "node-0")
    assert (node.cordoned, node.cordon_source) == (True, "remediation")


# -- taint and hook ----------------------------------------------------------------------------


def test_taint_on_an_executor_without_taints_fails_saying_why(
    api: TestClient, platform: Platform, clock: ManualClock
) -> None:
    rule = {
        "name": "taint-ecc",
        "condition": "GpuEcc",
        "action": "taint",
        "taint": {"key": "kiban.dev/gpu-ecc", "effect": "NoSchedule"},
    }
    set_health_policy(api, {"rules": [rule]})
    post(api, "node-0", clock.now(), ECC)
    with platform.sessions() as session:
        (action,) = session.scalars(select(RemediationAction)).all()
        assert (action.action, action.outcome) == ("taint", "failed")
        assert "does not offer node taints" in action.detail


def test_hook_runs_its_argument_list_with_the_node_filled_in(
    api: TestClient, platform: Platform, clock: ManualClock, tmp_path: Path
) -> None:
    marker = tmp_path / "hook-ran"
    script = "import sys, pathlib; pathlib.Path(sys.argv[1]).write_text(sys.argv[2])"
    rule = {
        "name": "reboot",
        "condition": "GpuXid",
        "action": "hook",
        "command": [sys.executable, "-c", script, str(marker), "{node}; rm -rf /"],
        "timeoutSeconds": 30,
    }
    set_health_policy(api, {"rules": [rule]})
    post(api, "node-2", clock.now(), {CheckType.GPU_XID: "Xid 79 on GPU 0"})
    assert marker.read_text() == "node-2; rm -rf /"  # one argument, never a shell
    assert actions(platform, "node-2") == [("node-2", "hook", "GpuXid", "done")]


def test_hook_cut_off_by_its_timeout_is_failed(
    api: TestClient, platform: Platform, clock: ManualClock
) -> None:
    rule = {
        "name": "slow",
        "condition": "GpuXid",
        "action": "hook",
        "command": [sys.executable, "-c", "import time; time.sleep(30)"],
        "timeoutSeconds": 0.5,
    }
    set_health_policy(api, {"rules": [rule]})
    post(api, "node-2", clock.now(), {CheckType.GPU_XID: "Xid 79 on GPU 0"})
    with platform.sessions() as session:
        (action,) = session.scalars(select(RemediationAction)).all()
        assert action.outcome == "failed"
        assert "did not finish within 0.5s" in action.detail


# -- policy and checks on demand ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("health", "field"),
    [
        ({"rules": [{"name": "a", "condition": "GpuFoo", "action": "drain"}]}, "condition"),
        ({"rules": [{"name": "a", "condition": "GpuEcc", "action": "reboot"}]}, "action"),
        (
            {"rules": [{"name": "a", "condition": "GpuEcc", "action": "hook", "command": "x y"}]},
            "command",
        ),
        ({"circuitBreaker": {"maxNodes": "ten"}}, "maxNodes"),
    ],
)
def test_policy_api_refuses_bad_health_rules_naming_the_field(
    api: TestClient, health: dict[str, Any], field: str
) -> None:
    response = api.put("/api/v1/policy", json={"health": health})
    assert response.status_code == 422
    assert f"health.{'rules[0].' if 'rules' in health else 'circuitBreaker.'}{field}" in (
        response.text
    )
    current = api.get("/api/v1/policy").json()
    assert "health" not in (current.get("document") or {})


def test_check_on_demand_without_an_agent_is_a_conflict(
    api: TestClient, platform: Platform
) -> None:
    response = api.post("/api/v1/nodes/node-0/health/check")
    assert response.status_code == 409
    assert "node-0" in response.text


def test_check_on_demand_with_an_agent_that_does_not_answer_is_unavailable(
    api: TestClient, platform: Platform, clock: ManualClock
) -> None:
    post(api, "node-0", clock.now(), agent_address="127.0.0.1:9")  # nothing listens there
    response = api.post("/api/v1/nodes/node-0/health/check")
    assert response.status_code == 503
    assert "did not answer" in response.text


def test_report_with_a_false_status_in_the_policy_is_refused(api: TestClient) -> None:
    rule = {"name": "a", "condition": "GpuEcc", "status": False, "action": "drain"}
    response = api.put("/api/v1/policy", json={"health": {"rules": [rule]}})
    assert response.status_code == 422
    assert "health.rules[0].status" in response.text


def test_status_unknown_is_accepted_and_true_may_be_a_yaml_boolean(api: TestClient) -> None:
    rules = [
        {"name": "a", "condition": "GpuEcc", "status": True, "action": "drain"},
        {"name": "b", "condition": "GpuBus", "status": "Unknown", "action": "cordon"},
    ]
    assert api.put("/api/v1/policy", json={"health": {"rules": rules}}).status_code == 200
    assert ConditionStatus.UNKNOWN.value == "Unknown"


def test_check_on_demand_asks_the_agent_and_takes_its_report(
    api: TestClient, platform: Platform, clock: ManualClock
) -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from urllib.parse import parse_qs, urlparse

    asked: list[str] = []

    class Agent(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            url = urlparse(self.path)
            node = parse_qs(url.query)["node"][0]
            asked.append(f"{url.path}?node={node}")
            report = health_report(node, clock.now(), ECC, agent_address=address)
            body = report.model_dump_json(by_alias=True).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Agent)
    address = f"127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        post(api, "node-1", clock.now(), agent_address=address)
        clock.advance(10)
        response = api.post("/api/v1/nodes/node-1/health/check")
    finally:
        server.shutdown()
    assert response.status_code == 200, response.text
    answer = response.json()
    assert (answer["node"], answer["taken_at"]) == ("node-1", clock.now())
    ecc = next(c for c in answer["conditions"] if c["type"] == "GpuEcc")
    assert (ecc["status"], ecc["lastTransitionTime"]) == ("True", clock.now())
    assert asked == ["/check?node=node-1"]
    assert conditions(platform, "node-1")["GpuEcc"].status == "True"
    assert node_row(platform, "node-1").cordon_source == "remediation"  # acted on as a report


def test_a_hook_left_pending_by_a_stopped_control_plane_is_failed_not_run_again(
    api: TestClient, platform: Platform, clock: ManualClock, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    rule = {
        "name": "reboot",
        "condition": "GpuXid",
        "action": "hook",
        "command": [sys.executable, "-c", f"open({str(marker)!r}, 'a').write('x')"],
    }
    set_health_policy(api, {"rules": [rule]})
    with platform.sessions() as session:  # recorded, then the control plane died
        from kiban.services import node_health, remediation

        report = health_report("node-1", clock.now(), {CheckType.GPU_XID: "Xid 79"})
        node_health.ingest(session, "node-1", report, clock.now())
        session.commit()
        remediation.remediate(session, platform.policy.health, ["node-1"], clock.now())
    assert actions(platform, "node-1") == [("node-1", "hook", "GpuXid", "pending")]
    clock.advance(5)
    from kiban.control.loop import ControlLoop

    ControlLoop(platform.sessions, platform.executor, clock=clock).run_once()
    assert actions(platform, "node-1") == [("node-1", "hook", "GpuXid", "failed")]
    assert not marker.exists()
    failed = [m for r, m in node_events(platform, "node-1") if r == "RemediationFailed"]
    assert len(failed) == 1 and "not run again" in failed[0]
