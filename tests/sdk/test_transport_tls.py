"""TLS as httpx verified it, now that the SDK speaks through httpcore: an https:// server is
checked against ``SSL_CERT_FILE`` (else ``SSL_CERT_DIR``, else certifi's bundle), and one it
cannot verify is an error naming why, never an unverified answer."""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from kiban.devtools.kube.certs import ControlPlaneCerts, generate_certs
from kiban.sdk.client import ApiError, Client


class Jobs(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps([{"id": "j", "path": self.path}]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def certs(tmp_path: Path) -> ControlPlaneCerts:
    return generate_certs(tmp_path / "pki")  # a CA, and a serving cert for 127.0.0.1


@pytest.fixture
def https_url(certs: ControlPlaneCerts) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Jobs)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs.serving_cert, certs.serving_key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_server_signed_by_the_trusted_ca_answers(
    https_url: str, certs: ControlPlaneCerts, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(certs.ca_cert))
    with Client(url=https_url, token="t") as client:
        assert client.jobs(state=["running"]) == [
            {"id": "j", "path": "/api/v1/jobs?limit=100&state=running"}
        ]


@pytest.mark.parametrize("trusted", ["certifi", "SSL_CERT_DIR"])
def test_a_server_that_cannot_be_verified_is_not_asked(
    https_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trusted: str
) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    if trusted == "SSL_CERT_DIR":
        monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path))  # no CA of this server's in it
    with Client(url=https_url, token="t") as client, pytest.raises(ApiError) as caught:
        client.jobs()
    assert caught.value.status == 0
    assert caught.value.message.startswith(f"cannot reach kiban at {https_url}: ")
    assert "CERTIFICATE_VERIFY_FAILED" in caught.value.message
