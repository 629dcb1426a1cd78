"""The node agent's loop over the readings seam: checks, timeouts, reports, metrics, its HTTP."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from kiban.cli.main import app as cli
from kiban.health.agent import NodeAgent
from kiban.health.agent_server import AgentServer, create_agent_app, parse_listen
from kiban.health.checks import HealthReason, judge
from kiban.health.conditions import CheckType, Condition, ConditionStatus
from kiban.health.readings import NodeReading
from kiban.health.report import NodeHealthReport
from kiban.health.reporting import ControlPlaneReporter
from kiban.health.sources import DirectoryReadings
from kiban.health.thresholds import HealthThresholds
from kiban.testing import ManualClock
from kiban.testing.health import node_reading, with_gpu

T, F, U = ConditionStatus.TRUE, ConditionStatus.FALSE, ConditionStatus.UNKNOWN


def put(directory: Path, reading: NodeReading) -> None:
    (directory / f"{reading.node}.json").write_text(reading.model_dump_json())


def by_type(report: NodeHealthReport) -> dict[CheckType, Condition]:
    return {c.type: c for c in report.conditions}


@pytest.fixture
def readings(tmp_path: Path) -> Path:
    put(tmp_path, node_reading("n1", gpus=4))
    put(tmp_path, node_reading("n2", gpus=4))
    return tmp_path


def agent_over(readings: Path, clock: ManualClock, **options: object) -> NodeAgent:
    return NodeAgent(["n1", "n2"], DirectoryReadings(readings), clock, **options)  # type: ignore[arg-type]


def test_a_fault_written_to_the_seam_fails_its_check(readings: Path) -> None:
    clock = ManualClock(1000.0)
    agent = agent_over(readings, clock)
    first = agent.check("n1")
    assert first.reading.taken_at == 1000.0
    assert {c.status for c in first.conditions} == {F}
    put(readings, with_gpu(node_reading("n1", gpus=4), 2, ecc_volatile_uncorrectable=3))
    clock.advance(30)
    found = by_type(agent.check("n1"))
    assert found[CheckType.GPU_ECC].status is T
    assert found[CheckType.GPU_ECC].last_transition_time == 1030.0
    assert "GPU 2 (GPU-00000002-0000-0000-0000-000000000000): 3 volatile" in (
        found[CheckType.GPU_ECC].message
    )


def test_a_missing_reading_is_unknown_not_healthy(readings: Path) -> None:
    (readings / "n2.json").unlink()
    found = by_type(agent_over(readings, ManualClock()).check("n2"))
    assert {c.status for c in found.values()} == {U}
    assert "no reading" in found[CheckType.GPU_ECC].message


def test_the_expected_count_is_learned_from_the_first_healthy_reading(readings: Path) -> None:
    agent = agent_over(readings, ManualClock())
    assert by_type(agent.check("n1"))[CheckType.GPU_COUNT].status is F
    put(readings, node_reading("n1", gpus=3))
    found = by_type(agent.check("n1"))[CheckType.GPU_COUNT]
    assert (found.status, found.reason) == (T, HealthReason.GPU_MISSING)


def test_a_configured_expected_count_wins(readings: Path) -> None:
    agent = agent_over(readings, ManualClock(), expected_gpus={"n1": 8})
    assert by_type(agent.check("n1"))[CheckType.GPU_COUNT].status is T


def test_tick_runs_the_nodes_that_are_due(readings: Path) -> None:
    clock = ManualClock()
    agent = agent_over(readings, clock, interval_s=30.0)
    assert [r.reading.node for r in agent.tick()] == ["n1", "n2"]
    assert agent.tick() == []
    assert agent.seconds_to_next() == 30.0
    clock.advance(29)
    assert agent.tick() == []
    clock.advance(1)
    assert len(agent.tick()) == 2


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    released = threading.Event()
    yield released
    released.set()  # let the abandoned threads end


def test_a_hanging_check_is_cut_off_and_the_others_report(
    readings: Path, gate: threading.Event
) -> None:
    def hanging_ecc(check: CheckType, *args: object) -> Condition:
        if check is CheckType.GPU_ECC:
            gate.wait()
        return judge(check, *args)  # type: ignore[arg-type]

    agent = agent_over(readings, ManualClock(), check_timeout_s=0.2, judge_check=hanging_ecc)
    found = by_type(agent.check("n1"))
    assert (found[CheckType.GPU_ECC].status, found[CheckType.GPU_ECC].reason) == (
        U,
        HealthReason.CHECK_TIMED_OUT,
    )
    assert "GpuEcc did not finish within 0.2 s" in found[CheckType.GPU_ECC].message
    assert found[CheckType.GPU_BUS].status is F
    assert agent.check_seconds[CheckType.GPU_ECC] == 0.2


def test_a_hanging_read_makes_every_check_timed_out(gate: threading.Event) -> None:
    class Hanging:
        def read(self, node: str) -> NodeReading:
            gate.wait()
            raise AssertionError("unreachable")

        def close(self) -> None:
            pass

    agent = NodeAgent(["n1"], Hanging(), ManualClock(), check_timeout_s=0.2)
    report = agent.check("n1")
    assert {(c.status, c.reason) for c in report.conditions} == {(U, HealthReason.CHECK_TIMED_OUT)}
    assert not report.reading.nvml_available


def test_a_read_that_raises_is_unknown(readings: Path) -> None:
    class Broken:
        def read(self, node: str) -> NodeReading:
            raise RuntimeError("driver reload")

        def close(self) -> None:
            pass

    report = NodeAgent(["n1"], Broken(), ManualClock()).check("n1")
    assert {(c.status, c.reason) for c in report.conditions} == {(U, HealthReason.CHECK_FAILED)}
    assert "driver reload" in report.conditions[0].message


class Recorder:
    """A control plane in an httpx.MockTransport: records reports, answers with allocations."""

    def __init__(self, status: int = 200, down: bool = False) -> None:
        self.requests: list[httpx.Request] = []
        self.status = status
        self.down = down

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        if self.status != 200:
            return httpx.Response(self.status, json={"detail": "no"})
        allocations = [{"gpu": 1, "job": "train-1", "tenant": "vision", "queue": "gpu"}]
        return httpx.Response(200, json={"allocations": allocations, "interval_s": 30.0})


def reporter_to(
    recorder: Callable[[httpx.Request], httpx.Response], sleeps: list[float]
) -> ControlPlaneReporter:
    return ControlPlaneReporter(
        "http://cp:8470", "tok", transport=httpx.MockTransport(recorder), sleep=sleeps.append
    )


def test_the_report_is_posted_and_the_reply_labels_the_metrics(readings: Path) -> None:
    recorder, sleeps = Recorder(), []
    agent = agent_over(readings, ManualClock(), reporter=reporter_to(recorder, sleeps))
    agent.address = "127.0.0.1:9400"
    agent.check("n1")
    (request,) = recorder.requests
    assert request.url.path == "/api/v1/nodes/n1/health"
    assert request.headers["Authorization"] == "Bearer tok"
    body = json.loads(request.content)
    assert body["agent_address"] == "127.0.0.1:9400"
    assert "lastTransitionTime" in body["conditions"][0]
    assert NodeHealthReport.model_validate(body).reading.node == "n1"
    text = TestClient(create_agent_app(agent)).get("/metrics").text
    assert (
        'DCGM_FI_DEV_GPU_TEMP{Hostname="n1",UUID="GPU-00000001-0000-0000-0000-000000000000",'
        'device="nvidia1",gpu="1",job="train-1",modelName="NVIDIA H100 80GB HBM3",'
        'queue="gpu",tenant="vision"} 31.0'
    ) in text
    assert 'DCGM_FI_DEV_GPU_TEMP{Hostname="n1",UUID="GPU-00000000' in text
    assert 'gpu="0",job="",modelName' in text


def test_a_control_plane_that_is_down_never_stops_the_agent(readings: Path) -> None:
    recorder, sleeps = Recorder(down=True), []
    reporter = reporter_to(recorder, sleeps)
    agent = agent_over(readings, ManualClock(), reporter=reporter)
    report = agent.check("n1")
    assert {c.status for c in report.conditions} == {F}
    assert len(recorder.requests) == 3
    assert sleeps == [0.5, 1.0]
    assert reporter.failures == 1
    assert agent.state["n1"].allocations == []


def test_a_refused_report_is_not_retried(readings: Path) -> None:
    recorder, sleeps = Recorder(status=404), []
    agent = agent_over(readings, ManualClock(), reporter=reporter_to(recorder, sleeps))
    agent.check("n1")
    assert len(recorder.requests) == 1


class BatchRecorder:
    """A control plane that takes batches (or refuses them with ``batch_status``) and single
    reports, each node's reply naming its own job on GPU 1."""

    def __init__(self, batch_status: int = 200) -> None:
        self.requests: list[httpx.Request] = []
        self.batch_status = batch_status

    @staticmethod
    def reply(node: str) -> dict[str, object]:
        held = [{"gpu": 1, "job": f"job-of-{node}", "tenant": "vision", "queue": "gpu"}]
        return {"allocations": held, "interval_s": 30.0}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.url.path == "/api/v1/nodes/health":
            if self.batch_status != 200:
                return httpx.Response(self.batch_status, json={"detail": "reports[1]: no"})
            nodes = [r["reading"]["node"] for r in json.loads(request.content)["reports"]]
            return httpx.Response(200, json={"replies": {n: self.reply(n) for n in nodes}})
        node = NodeHealthReport.model_validate_json(request.content).reading.node
        return httpx.Response(200, json=self.reply(node))


def test_nodes_due_together_are_reported_in_one_batch(readings: Path) -> None:
    recorder = BatchRecorder()
    clock = ManualClock()
    agent = agent_over(readings, clock, reporter=reporter_to(recorder, []))
    assert [r.reading.node for r in agent.tick()] == ["n1", "n2"]
    (request,) = recorder.requests
    assert request.url.path == "/api/v1/nodes/health"
    sent = [NodeHealthReport.model_validate(r) for r in json.loads(request.content)["reports"]]
    assert [r.reading.node for r in sent] == ["n1", "n2"]
    for node in ("n1", "n2"):  # each node keeps its own reply
        assert [a.job for a in agent.state[node].allocations] == [f"job-of-{node}"]
        assert agent.state[node].next_due == clock.now() + 30.0
    # A node due on its own goes to the per-node route.
    agent.state["n2"].next_due = clock.now() + 60
    clock.advance(30)
    agent.tick()
    assert recorder.requests[-1].url.path == "/api/v1/nodes/n1/health"


class SlowReadings(DirectoryReadings):
    """Readings that take a second of the clock's time each (a slow NVML)."""

    def __init__(self, directory: Path, clock: ManualClock) -> None:
        super().__init__(directory)
        self.clock = clock

    def read(self, node: str) -> NodeReading:
        self.clock.advance(1.0)
        return super().read(node)


def test_nodes_reported_together_stay_due_together_however_long_the_passes_take(
    readings: Path,
) -> None:
    recorder = BatchRecorder()
    clock = ManualClock()
    agent = NodeAgent(
        ["n1", "n2"],
        SlowReadings(readings, clock),
        clock,
        reporter=reporter_to(recorder, []),
        interval_s=30.0,
        follow_reply_interval=False,
    )
    for _ in range(3):
        assert len(agent.tick()) == 2
        clock.advance(agent.seconds_to_next())
    assert [r.url.path for r in recorder.requests] == ["/api/v1/nodes/health"] * 3


def test_a_refused_batch_is_sent_again_node_by_node(readings: Path) -> None:
    recorder = BatchRecorder(batch_status=422)
    reporter = reporter_to(recorder, [])
    agent = agent_over(readings, ManualClock(), reporter=reporter)
    agent.tick()
    assert [r.url.path for r in recorder.requests] == [
        "/api/v1/nodes/health",
        "/api/v1/nodes/n1/health",
        "/api/v1/nodes/n2/health",
    ]
    assert [a.job for a in agent.state["n2"].allocations] == ["job-of-n2"]
    assert reporter.failures == 0


def test_a_batch_the_control_plane_cannot_take_now_is_dropped_and_counted(
    readings: Path,
) -> None:
    recorder, sleeps = Recorder(status=503), list[float]()
    reporter = reporter_to(recorder, sleeps)
    agent = agent_over(readings, ManualClock(), reporter=reporter)
    assert len(agent.tick()) == 2
    assert len(recorder.requests) == 3  # retried, not sent node by node
    assert reporter.failures == 2
    assert agent.state["n1"].allocations == []


def test_metrics_of_the_checks_and_no_sample_for_a_field_not_given(readings: Path) -> None:
    put(readings, with_gpu(node_reading("n1", gpus=2), 0, power_w=None))
    agent = agent_over(readings, ManualClock())
    agent.check("n1")
    text = TestClient(create_agent_app(agent)).get("/metrics").text
    power = [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_POWER_USAGE{")]
    assert len(power) == 1 and 'gpu="1"' in power[0]
    assert 'kiban_agent_check_status{check="GpuEcc",node="n1",status="False"} 1.0' in text
    assert 'kiban_agent_check_seconds{check="GpuXid"}' in text
    assert 'DCGM_FI_DEV_XID_ERRORS{Hostname="n1"' in text


def test_nvlink_bandwidth_has_a_sample_only_where_the_reading_has_one(readings: Path) -> None:
    both = with_gpu(node_reading("n1", gpus=2), 0, nvlink_bandwidth_total=420)
    put(readings, with_gpu(both, 1, nvlink_bandwidth_total=None))  # GPU 1: NVML gave none
    agent = agent_over(readings, ManualClock())
    agent.check("n1")
    text = TestClient(create_agent_app(agent)).get("/metrics").text
    name = "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{"
    samples = [line for line in text.splitlines() if line.startswith(name)]
    assert len(samples) == 1 and 'gpu="0"' in samples[0] and samples[0].endswith(" 420.0")


def test_xid_metric_keeps_the_last_code(readings: Path) -> None:
    from kiban.health.readings import XidEvent

    clock = ManualClock()
    put(readings, with_gpu(node_reading("n1", gpus=1), 0, xids=(XidEvent(code=79, at=1.0),)))
    agent = agent_over(readings, clock)
    agent.check("n1")
    put(readings, node_reading("n1", gpus=1))
    agent.check("n1")
    text = TestClient(create_agent_app(agent)).get("/metrics").text
    xid = [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_XID_ERRORS{")]
    assert xid[0].endswith(" 79.0")


def test_check_endpoint(readings: Path) -> None:
    agent = agent_over(readings, ManualClock())
    client = TestClient(create_agent_app(agent))
    answer = client.post("/check", params={"node": "n2"})
    assert answer.status_code == 200
    assert NodeHealthReport.model_validate(answer.json()).reading.node == "n2"
    assert "several nodes" in client.post("/check").json()["detail"]
    assert client.post("/check", params={"node": "nope"}).status_code == 404
    assert client.get("/healthz").json()["nodes"] == ["n1", "n2"]


def test_the_server_picks_a_port_and_reports_its_address(readings: Path) -> None:
    agent = agent_over(readings, ManualClock())
    server = AgentServer(agent, "127.0.0.1", 0)
    server.start()
    try:
        assert agent.address == server.address and not agent.address.endswith(":0")
        for _ in range(100):
            try:
                answer = httpx.get(f"http://{server.address}/healthz", timeout=2)
                break
            except httpx.ConnectError:
                threading.Event().wait(0.05)
        assert answer.json()["address"] == agent.address
    finally:
        server.stop()


@pytest.mark.parametrize("bad", ["9400", "host:", ":80", "h:99999", "h:x"])
def test_bad_listen_addresses(bad: str) -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_listen(bad)


def run_cli(*args: str, env: Mapping[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), env=dict(env or {}))
    return result.exit_code, result.output


def test_once_json_over_the_seam(readings: Path) -> None:
    put(readings, with_gpu(node_reading("n1", gpus=2), 1, remap_pending=True))
    code, output = run_cli(
        "node-agent", "--node", "n1=0,1", "--readings-dir", str(readings), "--once", "--json"
    )
    assert code == 0, output
    (report,) = json.loads(output)
    statuses = {c["type"]: c["status"] for c in report["conditions"]}
    assert statuses["GpuRowRemap"] == "True"
    assert statuses["GpuCount"] == "False"


def test_once_table(readings: Path) -> None:
    code, output = run_cli("node-agent", "--node", "n1", "--readings-dir", str(readings), "--once")
    assert code == 0, output
    assert "GpuFabricManager" in output and "FabricCompleted" in output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--node", "n1=a"], "GPU indices must be whole numbers"),
        (["--json"], "--json goes with --once"),
        (["--url", "http://x"], "--url needs a token"),
        (["--readings-dir", "/nonexistent"], "is not a directory"),
    ],
)
def test_bad_options(args: list[str], message: str) -> None:
    code, output = run_cli("node-agent", *args, env={"KIBAN_TOKEN": "", "KIBAN_URL": ""})
    assert code == 1
    assert message in output


def test_bad_thresholds_file(tmp_path: Path, readings: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("pcie_replay_rise_per_pass: many\n")
    code, output = run_cli(
        "node-agent", "--readings-dir", str(readings), "--thresholds", str(path), "--once"
    )
    assert code == 1 and "pcie_replay_rise_per_pass" in output


def test_thresholds_reach_the_checks(tmp_path: Path, readings: Path) -> None:
    limits = HealthThresholds(pcie_replay_rise_per_pass=0)
    clock = ManualClock()
    agent = agent_over(readings, clock, thresholds=limits)
    agent.check("n1")
    put(readings, with_gpu(node_reading("n1", gpus=4), 0, pcie_replay_counter=1))
    assert by_type(agent.check("n1"))[CheckType.GPU_PCIE].status is T


class SlowerPlease(Recorder):
    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return httpx.Response(200, json={"allocations": [], "interval_s": 60.0})


@pytest.mark.parametrize(("follow", "interval"), [(True, 60.0), (False, 5.0)])
def test_the_reply_sets_the_interval_unless_it_was_set_by_hand(
    readings: Path, follow: bool, interval: float
) -> None:
    reporter = reporter_to(SlowerPlease(), [])
    clock = ManualClock()
    agent = agent_over(
        readings, clock, reporter=reporter, interval_s=5.0, follow_reply_interval=follow
    )
    agent.check("n1")
    assert agent.interval_s == interval
    assert agent.state["n1"].next_due == clock.now() + interval
