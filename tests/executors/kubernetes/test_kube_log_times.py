"""``kiban logs --since``, ``--timestamps`` and ``--tail`` on Kubernetes: the pod log API's
``timestamps=true`` gives each line's time, which becomes marks at the offsets of the log
``read_log`` serves; a kept log (its pod ended) has no times."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from kubernetes import client
from test_kube_kept_logs import JOB, ScriptedCluster, make, pod

from kiban.executors.kubernetes.api import CoreApi
from kiban.executors.kubernetes.executor import KubernetesExecutor
from kiban.executors.kubernetes.kept_logs import KeptLogs

T0 = 1714557600.0  # 2024-05-01T10:00:00Z
PLAIN = b"step 1\nstep 2\nstep 3\n"
TIMED = (
    b"2024-05-01T10:00:00.000000000Z step 1\n"
    b"2024-05-01T10:00:05.000000000Z step 2\n"
    b"2024-05-01T10:00:09.500000000Z step 3\n"
)


class LogEndpoint(BaseHTTPRequestHandler):
    """Serves the log, timed when asked; records each request's query."""

    protocol_version = "HTTP/1.1"
    queries: list[dict[str, list[str]]] = []

    def do_GET(self) -> None:
        query = parse_qs(urlsplit(self.path).query)
        self.queries.append(query)
        body = TIMED if query.get("timestamps") == ["true"] else PLAIN
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def api() -> Iterator[CoreApi]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), LogEndpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{server.server_address[1]}"
    core = CoreApi(client.ApiClient(configuration))
    LogEndpoint.queries = []
    yield core
    core.close()
    server.shutdown()
    server.server_close()


def test_the_api_is_asked_for_each_lines_time(api: CoreApi) -> None:
    assert api.read_pod_log("team-a", "kb-job-1-0", "main", timestamps=True) == TIMED
    assert api.read_pod_log("team-a", "kb-job-1-0", "main") == PLAIN
    assert LogEndpoint.queries == [
        {"container": ["main"], "timestamps": ["true"]},
        {"container": ["main"]},
    ]


class TimedCluster(ScriptedCluster):
    """The scripted cluster of the kept-logs tests, serving timed logs when asked."""

    def __init__(self, *pods: dict[str, object]) -> None:
        super().__init__(*pods)
        self.timed: dict[str, bytes] = {}

    def read_pod_log(  # type: ignore[override]
        self,
        namespace: str,
        name: str,
        container: str,
        tail_lines: int | None = None,
        *,
        timestamps: bool = False,
    ) -> bytes:
        if timestamps:
            self.calls.append(f"timed log {name}")
            return self.timed[name]
        return super().read_pod_log(namespace, name, container, tail_lines)


def live(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> tuple[TimedCluster, KubernetesExecutor]:
    cluster = TimedCluster(pod(0, "Running"))
    name = f"kb-{JOB}-1-0"
    cluster.logs = {name: PLAIN}
    cluster.timed = {name: TIMED}
    return cluster, make(monkeypatch, cluster, tmp_path)


@pytest.mark.parametrize(
    ("tail", "since", "expected"),
    [
        (None, None, PLAIN),
        (1, None, b"step 3\n"),
        (None, T0 + 5, b"step 2\nstep 3\n"),
        (None, T0 + 6, b"step 3\n"),
        (None, T0 + 60, b""),
        (2, T0 + 9, b"step 3\n"),
    ],
)
def test_a_live_logs_view_begins_at_its_last_lines_or_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    tail: int | None,
    since: float | None,
    expected: bytes,
) -> None:
    _, kube = live(monkeypatch, tmp_path)
    start = kube.log_start(JOB, 0, tail_lines=tail, since=since)
    assert start is not None
    assert kube.read_log(JOB, 0, start, 1000)[0] == expected
    kube.close()


def test_a_live_logs_times_are_its_lines_times(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cluster, kube = live(monkeypatch, tmp_path)
    assert kube.log_times(JOB, 0, 8, 21) == [(7, T0 + 5), (14, T0 + 9.5)]
    assert kube.log_times(JOB, 0, 0, 7) == [(0, T0)]
    assert cluster.calls.count(f"timed log kb-{JOB}-1-0") == 1  # fetched once for both
    kube.close()


def test_a_kept_logs_times_are_not_known(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cluster = TimedCluster()
    KeptLogs(tmp_path).keep(JOB, 1, 0, PLAIN)
    kube = make(monkeypatch, cluster, tmp_path)
    assert kube.log_start(JOB, 0, tail_lines=1, since=None) == len(PLAIN) - 7
    assert kube.log_start(JOB, 0, tail_lines=None, since=T0) is None
    assert kube.log_times(JOB, 0, 0, len(PLAIN)) is None
    kube.close()
