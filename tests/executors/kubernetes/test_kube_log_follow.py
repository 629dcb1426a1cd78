"""``CoreApi.follow_pod_log`` against a stand-in HTTP server that speaks the one endpoint: the
request the official client sends, and a chunked log that is handed on chunk by chunk as it
arrives (KWOK's fake nodes serve no logs, so the kube tier cannot show this)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
from kubernetes import client
from urllib3.exceptions import ReadTimeoutError

from kiban.executors.kubernetes.api import CoreApi


class LogEndpoint(BaseHTTPRequestHandler):
    """Writes three chunks, the last after ``release`` is set; records each request line."""

    protocol_version = "HTTP/1.1"
    requests: list[str] = []
    release = threading.Event()

    def do_GET(self) -> None:
        self.requests.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for chunk in (b"line 1\n", b"line 2\n"):
            self._chunk(chunk)
        self.release.wait(10)  # the container is still running
        self._chunk(b"stopping\n")
        self.wfile.write(b"0\r\n\r\n")  # it ended

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%b\r\n" % (len(data), data))
        self.wfile.flush()

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
    LogEndpoint.requests = []
    LogEndpoint.release = threading.Event()
    yield core
    LogEndpoint.release.set()
    core.close()
    server.shutdown()
    server.server_close()


def test_a_followed_log_comes_as_written_until_the_container_ends(api: CoreApi) -> None:
    stream = api.follow_pod_log("team-a", "kb-job-1-0", "main", tail_lines=500, timeout_s=10)
    seen = b""
    while b"line 2\n" not in seen:
        seen += next(stream)  # before the container ended: not held back until the end
    assert seen == b"line 1\nline 2\n"
    LogEndpoint.release.set()
    seen += b"".join(stream)
    assert seen == b"line 1\nline 2\nstopping\n"
    path = urlsplit(LogEndpoint.requests[0])
    assert path.path == "/api/v1/namespaces/team-a/pods/kb-job-1-0/log"
    assert parse_qs(path.query) == {
        "container": ["main"],
        "follow": ["true"],
        "tailLines": ["500"],
    }


def test_a_followed_log_that_stays_quiet_past_the_timeout_raises(api: CoreApi) -> None:
    started = time.monotonic()
    with pytest.raises(ReadTimeoutError):
        b"".join(api.follow_pod_log("team-a", "kb-job-1-0", "main", tail_lines=5, timeout_s=0.3))
    assert time.monotonic() - started < 5  # the read timed out, not the endpoint's 10 s wait


def test_a_whole_log_is_asked_without_a_tail(api: CoreApi) -> None:
    LogEndpoint.release.set()
    stream = api.follow_pod_log("team-a", "kb-job-1-0", "main", tail_lines=None, timeout_s=10)
    assert b"".join(stream) == b"line 1\nline 2\nstopping\n"
    query = parse_qs(urlsplit(LogEndpoint.requests[0]).query)
    assert query == {"container": ["main"], "follow": ["true"]}
