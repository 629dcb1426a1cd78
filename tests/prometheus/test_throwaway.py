"""The throwaway Prometheus the live test uses: it discovers targets through an http_sd
endpoint, scrapes them, answers queries and evaluates the rules it loads."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Gauge, generate_latest

from kiban.devtools.prometheus import ThrowawayPrometheus

pytestmark = pytest.mark.prometheus


@pytest.fixture
def exporter() -> Iterator[str]:
    """An HTTP server with a discovery endpoint listing itself, and a /metrics of one gauge."""
    registry = CollectorRegistry()
    Gauge("kiban_node_gpus", "GPUs", ["node"], registry=registry).labels(node="n0").set(8)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            host = f"127.0.0.1:{self.server.server_address[1]}"
            if self.path == "/api/v1/discovery/prometheus":
                labels = {"kiban_component": "control-plane", "__metrics_path__": "/metrics"}
                body = json.dumps([{"targets": [host], "labels": labels}]).encode()
            elif self.path == "/metrics":
                body = generate_latest(registry)
            else:
                self.send_error(404)
                return
            self.send_response(200)
            # Prometheus's http_sd refuses an answer of any other type.
            json_type = self.path.startswith("/api/")
            self.send_header("Content-Type", "application/json" if json_type else "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_it_discovers_scrapes_queries_and_evaluates_rules(
    prometheus_bin: Path, exporter: str, tmp_path: Path
) -> None:
    rules = tmp_path / "rules.yml"
    rules.write_text(
        "groups:\n- name: g\n  rules:\n  - alert: Many\n    expr: kiban_node_gpus > 4\n"
    )
    with ThrowawayPrometheus(f"{exporter}/api/v1/discovery/prometheus", rule_files=[rules]) as p:
        p.wait_for(
            lambda: [t.health for t in p.targets()] == ["up"],
            "the exporter to be scraped",
            timeout=30,
        )
        [target] = p.targets()
        assert target.labels["kiban_component"] == "control-plane"
        p.wait_for(lambda: bool(p.query("kiban_node_gpus")), "the first sample")
        [series] = p.query("kiban_node_gpus")
        assert series["metric"]["node"] == "n0" and series["value"][1] == "8"
        assert p.query("kiban_node_gpus > 8") == []
        p.wait_for(lambda: p.rules()[0]["state"] == "firing", "the alert to fire")
        assert p.rules()[0]["health"] == "ok"
