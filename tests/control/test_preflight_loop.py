"""Preflight in the loop: a multi-node gang placed on a node whose agent reports a failing
check is not launched; the node is excluded, the job keeps its place in line and the next
pass places it on other nodes. The agent is a real HTTP server in the test."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from loop_support import events, get, replica_rows, state
from sqlalchemy import update

from kiban.control.snapshot_builder import active_exclusions
from kiban.executors.base import NodeInfo
from kiban.health.conditions import CheckType, Condition, ConditionStatus
from kiban.health.readings import NodeReading
from kiban.health.report import NodeHealthReport
from kiban.platform import Platform, build_platform
from kiban.services import policy
from kiban.services.node_health import store_conditions
from kiban.store.models_nodes import Node, NodeCondition
from kiban.testing import FakeExecutor, ManualClock, manifest
from kiban.testing.platform_jobs import submit_to_platform

BAD = "node-1"


class FakeAgent(BaseHTTPRequestHandler):
    """``POST /check?node=NAME``: GpuEcc failing on ``BAD``, every check passing elsewhere."""

    asked: list[str] = []

    def do_POST(self) -> None:
        url = urlparse(self.path)
        node = parse_qs(url.query)["node"][0]
        FakeAgent.asked.append(node)
        failing = node == BAD
        report = NodeHealthReport(
            reading=NodeReading(node=node, taken_at=0.0, nvml_available=True),
            conditions=[
                Condition(
                    type=CheckType.GPU_ECC,
                    status=ConditionStatus.TRUE if failing else ConditionStatus.FALSE,
                    reason="EccUncorrectable" if failing else "NoEccErrors",
                    message="3 volatile uncorrectable errors on GPU 1" if failing else "",
                    last_transition_time=0.0,
                )
            ],
            interval_s=30,
        )
        body = report.model_dump_json(by_alias=True).encode()
        self.send_response(200 if url.path == "/check" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def agent() -> Iterator[str]:
    FakeAgent.asked = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeAgent)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def executor(clock: ManualClock) -> FakeExecutor:
    nodes = [
        NodeInfo(name=f"node-{i}", gpus=2, cpu_millis=8000, memory=32 * 2**30, labels={})
        for i in range(3)
    ]
    return FakeExecutor(nodes, clock=clock)


def with_agent(platform: Platform, address: str) -> None:
    with platform.sessions() as session:
        session.execute(update(Node).values(agent_address=address, agent_reported_at=None))
        session.commit()


def test_a_failing_node_is_excluded_and_the_gang_placed_again_keeping_its_place(
    platform: Platform, clock: ManualClock, agent: str
) -> None:
    with_agent(platform, agent)
    first = submit_to_platform(platform, manifest("ddp", replicas=2, gpu=2))
    submitted = get(platform, first).submitted_at
    clock.advance(1)
    platform.loop.run_once()

    # Placed on node-0 and node-1 (best fit, in order); node-1 fails: nothing launched.
    assert state(platform, first) == "Pending"
    assert replica_rows(platform, first) == []
    failed = [m for r, m in events(platform, first) if r == "PreflightFailed"]
    assert len(failed) == 1
    assert BAD in failed[0] and "GpuEcc" in failed[0] and "EccUncorrectable" in failed[0]
    excluded = get(platform, first).excluded_nodes
    assert excluded is not None and [e["node"] for e in excluded] == [BAD]
    assert sorted(set(FakeAgent.asked)) == ["node-0", "node-1"]

    # A later job for the same nodes does not pass it: the first keeps its submit time.
    later = submit_to_platform(platform, manifest("later", replicas=2, gpu=2))
    clock.advance(1)
    platform.loop.run_once()
    assert state(platform, first) == "Running"
    assert get(platform, first).submitted_at == submitted
    assert sorted(r.node for r in replica_rows(platform, first)) == ["node-0", "node-2"]
    assert state(platform, later) == "Pending"


def test_the_exclusion_expires(platform: Platform, clock: ManualClock, agent: str) -> None:
    with_agent(platform, agent)
    job = submit_to_platform(platform, manifest("ddp", replicas=3, gpu=2))
    clock.advance(1)
    platform.loop.run_once()
    assert state(platform, job) == "Pending"
    # It needs all three nodes: while node-1 is excluded it waits, saying why.
    clock.advance(1)
    platform.loop.run_once()
    waiting = get(platform, job)
    assert waiting.state == "Pending"
    assert "node exclusions (not node-1)" in (waiting.reason_message or "")
    # Once the exclusion has expired (and the node's agent is healthy again) it runs there.
    clock.advance(platform.loop.settings.preflight.exclude_for_s)
    with_agent(platform, "")  # no agent any more: the nodes pass unchecked
    platform.loop.run_once()
    assert state(platform, job) == "Running"


def test_nodes_without_an_agent_pass(platform: Platform, clock: ManualClock) -> None:
    job = submit_to_platform(platform, manifest("ddp", replicas=2, gpu=2))
    clock.advance(1)
    platform.loop.run_once()
    assert state(platform, job) == "Running"
    assert not [r for r, _ in events(platform, job) if r == "PreflightFailed"]


def test_recent_stored_conditions_are_used_without_asking(
    platform: Platform, clock: ManualClock, agent: str
) -> None:
    now = clock.now()
    with platform.sessions() as session:
        session.execute(update(Node).values(agent_address=agent, agent_reported_at=now))
        session.add(
            NodeCondition(
                node="node-0",
                type="GpuXid",
                status="True",
                reason="CriticalXid",
                message="Xid 79 on GPU 0",
                last_transition_time=now,
                updated_at=now,
                streak=1,
            )
        )
        session.commit()
    job = submit_to_platform(platform, manifest("ddp", replicas=2, gpu=2))
    platform.loop.run_once()
    assert FakeAgent.asked == []
    failed = [m for r, m in events(platform, job) if r == "PreflightFailed"]
    assert len(failed) == 1 and "node-0" in failed[0] and "GpuXid" in failed[0]


def test_a_job_requeued_from_an_unhealthy_node_keeps_off_it_when_it_is_back(
    platform: Platform, clock: ManualClock
) -> None:
    job = submit_to_platform(platform, manifest("ddp", replicas=2, gpu=2))
    clock.advance(1)
    platform.loop.run_once()
    assert sorted(r.node for r in replica_rows(platform, job)) == ["node-0", "node-1"]
    with platform.sessions() as session:
        session.execute(update(Node).where(Node.name == BAD).values(healthy=False))
        session.commit()
    clock.advance(1)
    platform.loop.run_once()
    with platform.sessions() as session:  # back at once (a flap): the retry still avoids it
        session.execute(update(Node).where(Node.name == BAD).values(healthy=True))
        session.commit()
    for _ in range(3):
        clock.advance(1)
        platform.loop.run_once()
    retried = get(platform, job)
    assert (retried.state, retried.attempt) == ("Running", 2)
    last = [r.node for r in replica_rows(platform, job) if r.attempt == 2]
    assert sorted(last) == ["node-0", "node-2"]


@pytest.fixture
def one_node(clock: ManualClock) -> FakeExecutor:
    return FakeExecutor(
        [NodeInfo(name="only", gpus=2, cpu_millis=8000, memory=32 * 2**30, labels={})],
        clock=clock,
    )


def test_on_a_single_node_the_requeued_job_waits_for_that_node_not_an_exclusion(
    tmp_path: Path, one_node: FakeExecutor, clock: ManualClock
) -> None:
    platform = build_platform(home=tmp_path / "home", db_url=None, executor=one_node, clock=clock)
    try:
        job = submit_to_platform(platform, manifest("train", replicas=1, gpu=2))
        clock.advance(1)
        platform.loop.run_once()
        for healthy in (False, True):
            with platform.sessions() as session:
                session.execute(update(Node).values(healthy=healthy))
                session.commit()
            for _ in range(2):
                clock.advance(1)
                platform.loop.run_once()
        retried = get(platform, job)
        assert (retried.state, retried.attempt, retried.excluded_nodes) == ("Running", 2, None)
    finally:
        platform.close()


@pytest.fixture
def silent_agent() -> str:
    """The address of an agent that is not there (nothing listens: refused at once)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


def reported(platform: Platform, node: str, at: float, address: str) -> None:
    """``node``'s agent at ``address`` last reported at ``at``, every check healthy."""
    with platform.sessions() as session:
        session.execute(
            update(Node)
            .where(Node.name == node)
            .values(agent_address=address, agent_reported_at=at)
        )
        session.add(
            NodeCondition(
                node=node,
                type="GpuEcc",
                status="False",
                reason="NoEccErrors",
                message="",
                last_transition_time=at,
                updated_at=at,
                streak=5,
            )
        )
        session.commit()


def test_a_node_whose_agent_is_silent_past_the_agent_timeout_fails_and_is_excluded(
    platform: Platform, clock: ManualClock, silent_agent: str
) -> None:
    now = clock.now()
    reported(platform, "node-0", now - 5.0, silent_agent)  # asked (not within fresh_s)
    reported(platform, BAD, now - 600.0, silent_agent)  # silent for 10 minutes: Unknown
    job = submit_to_platform(platform, manifest("ddp", replicas=2, gpu=2))
    platform.loop.run_once()
    assert state(platform, job) == "Pending"
    failed = [m for r, m in events(platform, job) if r == "PreflightFailed"]
    assert len(failed) == 1 and failed[0].startswith(f"preflight failed on {BAD}: AgentUnreachable")
    assert "600 s old" in failed[0]
    excluded = get(platform, job).excluded_nodes or []
    assert [(e["node"], e["reason"]) for e in excluded] == [(BAD, "AgentUnreachable")]
    clock.advance(1)
    platform.loop.run_once()  # placed again: node-0 (its silent agent's report is recent), node-2
    assert state(platform, job) == "Running"
    assert get(platform, job).submitted_at <= now
    assert sorted(r.node for r in replica_rows(platform, job)) == ["node-0", "node-2"]


def test_a_silent_agent_passes_when_told_to(
    platform: Platform, clock: ManualClock, silent_agent: str
) -> None:
    with platform.sessions() as session:
        document = dict(policy.current_record(session).document)
        document["health"] = {"preflight": {"unreachableAgent": "pass"}}
        policy.apply_policy(session, document, actor="test", at=clock.now())
        session.commit()
    reported(platform, BAD, clock.now() - 600.0, silent_agent)
    job = submit_to_platform(platform, manifest("ddp", replicas=2, gpu=2))
    platform.loop.run_once()
    assert state(platform, job) == "Running"
    assert not [r for r, _ in events(platform, job) if r == "PreflightFailed"]


def healthy_check(platform: Platform, node: str, at: float) -> None:
    """One report of ``node``'s agent with every check healthy."""
    healthy = Condition(
        type=CheckType.GPU_ECC,
        status=ConditionStatus.FALSE,
        reason="NoEccErrors",
        last_transition_time=at,
    )
    with platform.sessions() as session:
        store_conditions(session, node, [healthy], at)
        session.commit()


def excluded_from(platform: Platform, job: str) -> list[str]:
    return [e["node"] for e in get(platform, job).excluded_nodes or []]


def test_an_exclusion_ends_once_the_node_passed_k_healthy_checks(
    platform: Platform, clock: ManualClock, agent: str
) -> None:
    with_agent(platform, agent)
    start = clock.now()
    job = submit_to_platform(platform, manifest("ddp", replicas=3, gpu=2))  # needs all three
    clock.advance(1)
    platform.loop.run_once()
    assert excluded_from(platform, job) == [BAD]
    with_agent(platform, "")  # repaired; its checks now come in as reports
    k = 3  # health.returnToService.healthyChecks by default
    for _ in range(k - 1):
        clock.advance(30)
        healthy_check(platform, BAD, clock.now())
        platform.loop.run_once()
    assert excluded_from(platform, job) == [BAD]  # K-1 healthy checks: still kept off it
    assert state(platform, job) == "Pending"
    clock.advance(30)
    healthy_check(platform, BAD, clock.now())
    platform.loop.run_once()
    assert excluded_from(platform, job) == []
    ended = [m for r, m in events(platform, job) if r == "ExclusionEnded"]
    assert ended == [
        f"node {BAD} passed 3 consecutive healthy checks since it was excluded "
        "(returnToService.healthyChecks: 3): this job may run there again"
    ]
    clock.advance(1)
    platform.loop.run_once()
    assert state(platform, job) == "Running"  # long before exclude_for_s (30 minutes)
    assert clock.now() - start < platform.loop.settings.preflight.exclude_for_s / 10


def test_without_healthy_checks_an_exclusion_ends_at_its_time_bound(
    platform: Platform, clock: ManualClock, agent: str
) -> None:
    with_agent(platform, agent)
    job = submit_to_platform(platform, manifest("ddp", replicas=3, gpu=2))
    clock.advance(1)
    platform.loop.run_once()
    with_agent(platform, "")
    healthy_check(platform, BAD, clock.now())  # one healthy check only: not enough
    until = float((get(platform, job).excluded_nodes or [{}])[0]["until"])
    clock.advance(until - clock.now() - 1)
    platform.loop.run_once()
    assert excluded_from(platform, job) == [BAD]
    assert active_exclusions(get(platform, job).excluded_nodes, clock.now()) == {BAD}
    assert state(platform, job) == "Pending"
    clock.advance(2)
    assert active_exclusions(get(platform, job).excluded_nodes, clock.now()) == frozenset()
    platform.loop.run_once()
    assert state(platform, job) == "Running"
    assert not [r for r, _ in events(platform, job) if r == "ExclusionEnded"]
