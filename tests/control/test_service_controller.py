"""The service controller over the fake executor: replicas as jobs, readiness, rollouts, routes,
failed revisions, scale from zero, deletion."""

from __future__ import annotations

import http.server
import socketserver
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from kiban.control.revision_services import RESYNC_S
from kiban.control.serving_controller import ServiceController
from kiban.executors.base import CANNOT_START, EXIT_CANNOT_START
from kiban.platform import Platform
from kiban.services import jobs, serving
from kiban.services.auth import Principal
from kiban.services.service_status import service_status
from kiban.serving.router.traffic import TrafficMetrics
from kiban.store.models import Event, Job
from kiban.store.models_serving import ServiceRevision, ServiceRow
from kiban.testing import FakeExecutor, ManualClock, manifest
from kiban.testing.platform_jobs import submit_to_platform

ALICE = Principal(name="alice", tenant="default", is_admin=False)


class Probe:
    """Readiness as the test says: addresses listed in ``ready`` answer 200."""

    def __init__(self) -> None:
        self.ready: set[str] = set()
        self.all = False

    def __call__(self, address: str, path: str) -> bool:
        return self.all or address in self.ready


@pytest.fixture
def probe(platform: Platform) -> Probe:
    found = Probe()
    platform.services.probe = found
    return found


def service_doc(name: str = "chat", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": {"name": "tiny", "storageUri": "file:///models/tiny"},
        "resources": {"gpu": 1},
        **spec,
    }
    return {"apiVersion": "kiban/v1", "kind": "Service", "metadata": {"name": name}, "spec": body}


def apply(platform: Platform, document: dict[str, Any]) -> None:
    with platform.sessions() as session:
        serving.apply(session, ALICE, document, facts=platform.facts, at=platform.clock.now())
        session.commit()


def settle(platform: Platform, passes: int = 3) -> None:
    """Controller and control loop, in turns: replicas are made, placed, probed."""
    for _ in range(passes):
        platform.services.run_once()
        platform.loop.run_once()
    platform.services.run_once()


def start_canary(platform: Platform, probe: Probe, canary: dict[str, Any]) -> None:
    """Apply ``canary`` over a Ready service; only the stable revision's replicas answer their
    probes, so the canary's stay unready."""
    apply(platform, canary)
    probe.all = False
    route = platform.routes.get("default", "chat")
    assert route is not None
    probe.ready = {e.address for e in route.endpoints}
    settle(platform)


def replica_jobs(platform: Platform, state: str | None = None) -> list[Job]:
    with platform.sessions() as session:
        query = select(Job).order_by(Job.submitted_at, Job.id)
        if state is not None:
            query = query.where(Job.state == state)
        return list(session.scalars(query))


def revision_states(platform: Platform) -> list[tuple[int, str, str]]:
    with platform.sessions() as session:
        query = select(ServiceRevision).order_by(ServiceRevision.number)
        return [(r.number, r.state, r.message) for r in session.scalars(query)]


def service_events(platform: Platform) -> list[str]:
    with platform.sessions() as session:
        query = select(Event).where(Event.object_kind == "Service").order_by(Event.id)
        return [e.reason for e in session.scalars(query)]


def test_a_service_runs_its_replicas_as_serving_priority_jobs_and_routes_to_ready_ones(
    platform: Platform, probe: Probe
) -> None:
    apply(platform, service_doc(minReplicas=2, maxReplicas=3, containerConcurrency=4))
    settle(platform)
    running = replica_jobs(platform, "Running")
    assert len(running) == 2
    assert {j.priority for j in running} == {5000}  # the serving class, above "normal"
    assert all(j.spec["metadata"]["labels"]["kiban.dev/service"] == "chat" for j in running)
    route = platform.routes.get("default", "chat")
    assert route is not None
    assert dict(route.traffic) == {"chat-00001": 100}
    assert route.max_concurrency_per_endpoint == 4  # more wait in the router's queue
    assert not any(e.ready for e in route.endpoints)  # nothing answers its probe yet
    probe.all = True
    settle(platform, passes=1)
    route = platform.routes.get("default", "chat")
    assert route is not None and all(e.ready for e in route.endpoints)
    assert sorted(e.address for e in route.endpoints) == sorted(
        f"{j.id}.fake:{j.master_port}" for j in running
    )
    assert revision_states(platform) == [(1, "Ready", "")]
    with platform.sessions() as session:
        row = session.scalars(select(ServiceRow)).one()
        assert (row.stable_revision, row.canary_revision) == (1, None)  # rolled out by itself


def test_a_replica_whose_random_job_id_is_taken_gets_a_fresh_one(
    platform: Platform, probe: Probe, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every replica of a revision's slot is a job of one name: over months of scaling, two of
    its random ids meet now and then; the controller must not fail its pass on that."""
    taken = submit_to_platform(platform, manifest("chat-00001-0"))
    fresh = iter([taken, taken, "chat-00001-0-fresh1"])
    monkeypatch.setattr(jobs, "new_job_id", lambda name: next(fresh))
    apply(platform, service_doc(minReplicas=1, maxReplicas=1))
    settle(platform)
    (replica,) = [j for j in replica_jobs(platform, "Running") if j.id != taken]
    assert replica.id == "chat-00001-0-fresh1"
    with platform.sessions() as session:
        submitted = session.scalars(
            select(Event).where(Event.reason == "Submitted", Event.object_name == replica.id)
        ).all()
    assert len(submitted) == 1  # its event names the id it was stored under


def test_a_model_server_replica_is_sent_two_batches_at_once_and_the_rest_wait(
    platform: Platform, probe: Probe
) -> None:
    apply(platform, service_doc())
    probe.all = True
    settle(platform)
    route = platform.routes.get("default", "chat")
    assert route is not None and route.max_concurrency_per_endpoint == 16  # 2 x batch of 8
    custom = service_doc(
        "static",
        runtime="custom",
        command=["serve"],
        model={"name": "static"},
        port=8000,
        readinessPath="/healthz",
    )
    apply(platform, custom)
    settle(platform)
    route = platform.routes.get("default", "static")
    assert route is not None and route.max_concurrency_per_endpoint == 0  # capacity unknown


def test_a_canary_that_batches_less_is_capped_lower_than_the_stable_revision(
    platform: Platform, probe: Probe
) -> None:
    apply(platform, service_doc(scaleTarget=12))
    probe.all = True
    settle(platform)
    canary = service_doc(scaleTarget=12, canaryTrafficPercent=20)
    canary["spec"]["model"]["args"] = ["--max_batch_size", "2"]
    apply(platform, canary)
    settle(platform)
    route = platform.routes.get("default", "chat")
    assert route is not None and dict(route.traffic) == {"chat-00001": 80, "chat-00002": 20}
    assert dict(route.limits) == {"chat-00001": 16, "chat-00002": 4}  # 2 batches of 8, of 2
    with platform.sessions() as session:
        shown = service_status(session, session.scalars(select(ServiceRow)).one())
    assert [r.replica_concurrency for r in shown.revisions] == [16, 4]  # as describe shows
    with platform.sessions() as session:
        service = session.scalars(select(ServiceRow)).one()
    stable, new = (platform.services.decisions[(service.id, n)] for n in (1, 2))
    # the target within each one's own cap, at Knative's 70% utilization
    assert (stable.per_replica, new.per_replica) == pytest.approx((12 * 0.7, 4 * 0.7))


def test_a_canary_gets_its_share_once_ready_and_a_crashed_replica_is_replaced(
    platform: Platform, probe: Probe, executor: FakeExecutor
) -> None:
    apply(platform, service_doc())
    probe.all = True
    settle(platform)
    v2 = service_doc(canaryTrafficPercent=25)
    v2["spec"]["model"]["args"] = ["--dtype", "float32"]
    start_canary(platform, probe, v2)
    route = platform.routes.get("default", "chat")
    assert route is not None and dict(route.traffic) == {"chat-00001": 100}  # canary loading
    probe.all = True
    settle(platform, passes=1)
    route = platform.routes.get("default", "chat")
    assert route is not None and dict(route.traffic) == {"chat-00001": 75, "chat-00002": 25}
    # A ready replica that dies is replaced by a new job; the revision stays Ready.
    first = replica_jobs(platform, "Running")[0]
    executor.finish_all(first.id, exit_code=1)
    settle(platform)
    assert len(replica_jobs(platform, "Running")) == 2
    assert [s for _, s, _ in revision_states(platform)] == ["Ready", "Ready"]


def test_a_revision_whose_model_cannot_load_fails_and_traffic_stays(
    platform: Platform, probe: Probe, executor: FakeExecutor
) -> None:
    apply(platform, service_doc())
    probe.all = True
    settle(platform)
    broken = service_doc(canaryTrafficPercent=50)
    broken["spec"]["model"]["storageUri"] = "file:///models/missing"
    start_canary(platform, probe, broken)
    canary = [j for j in replica_jobs(platform, "Running") if "00002" in j.name]
    assert len(canary) == 1
    replica = executor.running(canary[0].id)[0]
    replica.log += b"loading\nKIBAN_LOAD_FAILED: no model files in /models/missing\n"
    executor.finish_all(canary[0].id, exit_code=3)
    settle(platform)
    assert revision_states(platform)[1] == (2, "Failed", "no model files in /models/missing")
    route = platform.routes.get("default", "chat")
    assert route is not None and dict(route.traffic) == {"chat-00001": 100}
    assert not [j for j in replica_jobs(platform, "Pending") if "00002" in j.name]
    assert "RevisionFailed" in service_events(platform)


def test_describe_says_what_a_running_replica_waits_for(
    platform: Platform, probe: Probe, executor: FakeExecutor
) -> None:
    apply(platform, service_doc())
    settle(platform)
    job = replica_jobs(platform, "Running")[0]
    why = "waiting for its image: ErrImagePull: manifest unknown"
    executor.running(job.id)[0].waiting = why
    settle(platform)
    with platform.sessions() as session:
        shown = service_status(session, session.scalars(select(ServiceRow)).one())
    assert [(r.job_id, r.state, r.ready, r.reason) for r in shown.replicas] == [
        (job.id, "Running", False, why)
    ]


def test_a_revision_whose_container_cannot_start_fails_at_its_first_replica(
    platform: Platform, probe: Probe, executor: FakeExecutor
) -> None:
    apply(platform, service_doc())
    probe.all = True
    settle(platform)
    broken = service_doc(canaryTrafficPercent=50, image="registry.example/server:missing")
    start_canary(platform, probe, broken)
    canary = [j for j in replica_jobs(platform, "Running") if "00002" in j.name]
    why = f"{CANNOT_START}: its image was not pulled in 600 s: ImagePullBackOff: not found"
    executor.finish_all(canary[0].id, exit_code=EXIT_CANNOT_START, message=why)
    settle(platform)
    number, state, message = revision_states(platform)[1]
    assert (number, state) == (2, "Failed")
    assert message.endswith(f"exited with code 128: {why}")
    route = platform.routes.get("default", "chat")
    assert route is not None and dict(route.traffic) == {"chat-00001": 100}
    assert not [j for j in replica_jobs(platform, "Pending") if "00002" in j.name]


def test_a_revision_fails_at_its_third_replica_that_exits_unready_and_unexplained(
    platform: Platform, probe: Probe, executor: FakeExecutor
) -> None:
    apply(platform, service_doc())
    probe.all = True
    settle(platform)
    crashing = service_doc(canaryTrafficPercent=50)
    crashing["spec"]["model"]["args"] = ["--dtype", "float32"]
    start_canary(platform, probe, crashing)
    for crash in range(1, 4):
        canary = [j for j in replica_jobs(platform, "Running") if "00002" in j.name]
        assert len(canary) == 1, f"crash {crash}: a replacement runs"
        assert revision_states(platform)[1][1] == "Loading"
        executor.finish_all(canary[0].id, exit_code=1)
        settle(platform)
    number, state, message = revision_states(platform)[1]
    assert (number, state) == (2, "Failed")
    assert message.startswith("3 replicas exited before becoming ready; the last: ")
    assert not [j for j in replica_jobs(platform, "Running") if "00002" in j.name]
    route = platform.routes.get("default", "chat")
    assert route is not None and dict(route.traffic) == {"chat-00001": 100}


def test_scale_to_zero_after_the_grace_period_and_from_zero_when_a_request_waits(
    platform: Platform, probe: Probe
) -> None:
    seconds = ManualClock(start=1000.0)
    platform.services.traffic = TrafficMetrics(clock=seconds.now)
    apply(platform, service_doc(minReplicas=0, maxReplicas=2))
    probe.all = True
    settle(platform)
    # Knative's initial scale: one replica shows that the model loads.
    assert len(replica_jobs(platform, "Running")) == 1
    settle(platform)
    seconds.advance(20)  # idle, but within the 30 s grace period
    settle(platform)
    assert len(replica_jobs(platform, "Running")) == 1
    seconds.advance(15)
    settle(platform, passes=4)
    assert replica_jobs(platform, "Running") == []
    route = platform.routes.get("default", "chat")
    assert route is not None and dict(route.traffic) == {"chat-00001": 100}  # requests wait
    platform.services.traffic.counter(("default", "chat"), "chat-00001").was_queued()
    settle(platform)
    assert len(replica_jobs(platform, "Running")) == 1


def test_a_canary_scaled_to_zero_keeps_its_share_and_is_started_for_its_requests(
    platform: Platform, probe: Probe
) -> None:
    seconds = ManualClock(start=1000.0)
    platform.services.traffic = TrafficMetrics(clock=seconds.now)
    apply(platform, service_doc(minReplicas=0, maxReplicas=2))
    probe.all = True
    settle(platform)
    canary = service_doc(minReplicas=0, maxReplicas=2, canaryTrafficPercent=30)
    canary["spec"]["model"]["args"] = ["--dtype", "float32"]
    apply(platform, canary)
    settle(platform)
    assert [s for _, s, _ in revision_states(platform)] == ["Ready", "Ready"]
    seconds.advance(35)  # idle past the 30 s grace period: both revisions go to zero
    settle(platform, passes=4)
    assert replica_jobs(platform, "Running") == []
    route = platform.routes.get("default", "chat")
    assert route is not None and dict(route.traffic) == {"chat-00001": 70, "chat-00002": 30}
    with platform.sessions() as session:
        shown = service_status(session, session.scalars(select(ServiceRow)).one())
    assert shown.traffic == dict(route.traffic)  # describe shows the router's split
    # A request drawn for the canary waits in the router: the canary is started for it,
    # and keeps its share while it starts.
    platform.services.traffic.counter(("default", "chat"), "chat-00002").was_queued()
    probe.all = False
    settle(platform)
    running = replica_jobs(platform, "Running")
    assert ["00002" in j.name for j in running] == [True]  # the canary's, and only it
    route = platform.routes.get("default", "chat")
    assert route is not None and dict(route.traffic) == {"chat-00001": 70, "chat-00002": 30}


def test_a_cpu_scaled_service_follows_its_replicas_cpu_use(
    platform: Platform, probe: Probe, executor: FakeExecutor
) -> None:
    """scaleMetric cpu, target 50% of one CPU: 1.5 busy cores need 3 replicas; once the load
    falls to 0.2 cores, the panic and the stable window pass and one is left."""
    seconds = ManualClock(start=1000.0)
    platform.services.traffic = TrafficMetrics(clock=seconds.now)
    document = service_doc(
        minReplicas=1, maxReplicas=4, scaleMetric="cpu", scaleTarget=50,
        resources={"gpu": 1, "cpu": 1},
    )  # fmt: skip
    apply(platform, document)
    probe.all = True
    settle(platform)
    assert len(replica_jobs(platform, "Running")) == 1

    def run(busy_cores: float, for_s: int, step_s: int = 1) -> int:
        for _ in range(0, for_s, step_s):
            seconds.advance(step_s)
            executor.burn(busy_cores, step_s)  # shared by the replicas running
            settle(platform, passes=1)
        return len(replica_jobs(platform, "Running"))

    assert run(1.5, 6) == 3  # 150% of one CPU: panic, then 3 at 50% each
    assert run(1.5, 60) == 3  # steady
    assert run(0.2, 150, step_s=5) == 1
    assert "AppliedWithWarnings" not in service_events(platform)


def test_a_replica_asked_to_stop_takes_no_new_request_from_that_pass_on(
    platform: Platform, probe: Probe
) -> None:
    """The pass that scales a replica down takes it out of the router's choices at once: its
    process may be stopped before the next pass, and a request sent to it then would fail."""
    seconds = ManualClock(start=1000.0)
    platform.services.traffic = TrafficMetrics(clock=seconds.now)
    apply(platform, service_doc(minReplicas=0, maxReplicas=2))
    probe.all = True
    settle(platform)
    route = platform.routes.get("default", "chat")
    assert route is not None and [e.ready for e in route.endpoints] == [True]
    seconds.advance(35)  # idle past the 30 s grace period: scale to zero
    platform.services.run_once()  # this pass asks the replica to stop
    assert len(replica_jobs(platform, "Stopping")) == 1
    route = platform.routes.get("default", "chat")
    assert route is not None and not any(e.ready for e in route.endpoints)
    assert dict(route.traffic) == {"chat-00001": 100}  # a request now waits for a new one


def test_deleting_a_service_stops_its_replicas_and_then_removes_it(
    platform: Platform, probe: Probe
) -> None:
    apply(platform, service_doc(minReplicas=2, maxReplicas=2))
    probe.all = True
    settle(platform)
    assert len(replica_jobs(platform, "Running")) == 2
    with platform.sessions() as session:
        serving.delete(session, ALICE, "chat", platform.clock.now())
        session.commit()
    settle(platform, passes=4)
    assert {j.state for j in replica_jobs(platform)} == {"Cancelled"}
    with platform.sessions() as session:
        assert session.scalars(select(ServiceRow)).all() == []
    assert platform.routes.get("default", "chat") is None
    assert service_events(platform)[-1] == "Removed"


class RevisionServices:
    """A cluster's Services per revision (of tenant "default"), as an executor that publishes
    revisions keeps them; while ``refuse`` is set, removing one fails."""

    def __init__(self) -> None:
        self.live: set[str] = set()
        self.refuse = False

    def publish_revision(self, tenant: str, service: str, revision: str, port: int) -> str:
        self.live.add(revision)
        return f"kbs-{revision}.svc:80"

    def unpublish_revision(self, tenant: str, revision: str) -> None:
        if self.refuse:
            raise RuntimeError("the API server is unavailable")
        self.live.discard(revision)

    def published_revisions(self) -> dict[tuple[str, str], str]:
        return {("default", r): f"kbs-{r}.svc:80" for r in self.live}


@pytest.fixture
def cluster(executor: FakeExecutor, monkeypatch: pytest.MonkeyPatch) -> RevisionServices:
    """The fake executor with revision Services, as the Kubernetes executor has them."""
    found = RevisionServices()
    monkeypatch.setattr(executor, "offers", replace(executor.offers, revisions=found))
    return found


def with_canary(platform: Platform) -> None:
    """Service "chat": revision 1 stable, revision 2 a canary at 25%, both ready."""
    apply(platform, service_doc())
    settle(platform)
    v2 = service_doc(canaryTrafficPercent=25)
    v2["spec"]["model"]["args"] = ["--dtype", "float32"]
    apply(platform, v2)
    settle(platform)


def restart_controller(platform: Platform, probe: Probe) -> None:
    """A new service controller, as a restarted control plane has: it remembers nothing."""
    platform.services.stop()
    platform.services = ServiceController(
        sessions=platform.sessions,
        executor=platform.executor,
        table=platform.routes,
        traffic=platform.traffic,
        facts=lambda: platform.facts,
        clock=platform.clock,
        probe=probe,
    )


def test_deleting_a_service_removes_the_services_of_its_revisions(
    platform: Platform, probe: Probe, cluster: RevisionServices
) -> None:
    probe.all = True
    with_canary(platform)
    assert cluster.live == {"chat-00001", "chat-00002"}  # both take traffic
    with platform.sessions() as session:
        serving.delete(session, ALICE, "chat", platform.clock.now())
        session.commit()
    settle(platform, passes=4)
    with platform.sessions() as session:
        assert session.scalars(select(ServiceRow)).all() == []
    assert cluster.live == set()


def test_a_restarted_controller_removes_the_services_that_take_no_traffic_now(
    platform: Platform, probe: Probe, cluster: RevisionServices
) -> None:
    probe.all = True
    with_canary(platform)
    assert cluster.live == {"chat-00001", "chat-00002"}
    # While the control plane is down, the canary is rolled back; and a Service is left of a
    # service removed from the store before (its removal failed, or was never tried).
    with platform.sessions() as session:
        serving.rollback(session, ALICE, "chat", platform.clock.now())
        session.commit()
    cluster.live.add("gone-00003")
    restart_controller(platform, probe)
    platform.services.run_once()
    assert cluster.live == {"chat-00001"}  # the stable revision's is kept
    assert platform.services.revision_services.published == {
        ("default", "chat-00001"): "kbs-chat-00001.svc:80"
    }


def test_a_service_deleted_by_hand_is_made_again_once_the_services_are_listed_again(
    platform: Platform, probe: Probe, cluster: RevisionServices, clock: ManualClock
) -> None:
    probe.all = True
    apply(platform, service_doc())
    settle(platform)
    cluster.live.discard("chat-00001")  # by someone else: the controller believes it exists
    platform.services.run_once()
    assert cluster.live == set()
    clock.advance(RESYNC_S)
    platform.services.run_once()
    assert cluster.live == {"chat-00001"}


def test_a_service_that_cannot_be_removed_is_removed_in_a_later_pass_after_its_service(
    platform: Platform, probe: Probe, cluster: RevisionServices
) -> None:
    probe.all = True
    with_canary(platform)
    cluster.refuse = True
    with platform.sessions() as session:
        serving.delete(session, ALICE, "chat", platform.clock.now())
        session.commit()
    settle(platform, passes=4)
    with platform.sessions() as session:
        assert session.scalars(select(ServiceRow)).all() == []  # gone from the store
    assert cluster.live == {"chat-00001", "chat-00002"}  # every removal failed so far
    cluster.refuse = False
    platform.services.run_once()
    assert cluster.live == set()
    assert platform.services.revision_services.published == {}


def test_a_service_scaling_up_preempts_lower_priority_training(
    platform: Platform, probe: Probe
) -> None:
    training = [submit_to_platform(platform, manifest(f"train-{i}", gpu=2)) for i in range(3)]
    platform.loop.run_once()
    assert [j.state for j in replica_jobs(platform)] == ["Running"] * 3  # every GPU taken
    probe.all = True
    apply(platform, service_doc(minReplicas=1))
    settle(platform, passes=5)
    states = {j.id: j.state for j in replica_jobs(platform)}
    preempted = [t for t in training if states[t] != "Running"]
    assert len(preempted) == 1  # one 2-GPU job makes room for the 1-GPU replica
    assert [j.name for j in replica_jobs(platform, "Running") if j.id not in training] == [
        "chat-00001-0"
    ]


class _Ready(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/v2/health/ready" else 503)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_a_replica_on_a_unix_socket_is_probed_there(platform: Platform, tmp_path: Path) -> None:
    path = tmp_path / "replica.sock"
    server = socketserver.UnixStreamServer(str(path), _Ready)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        ready = platform.services._ready
        assert ready(f"unix:{path}", "/v2/health/ready")
        client = platform.services.prober.unix_clients[str(path)]
        assert ready(f"unix:{path}", "/v2/health/ready")
        assert platform.services.prober.unix_clients == {str(path): client}  # its client is kept
        assert not ready(f"unix:{path}", "/loading")
        assert not ready(f"unix:{tmp_path / 'gone.sock'}", "/v2/health/ready")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
