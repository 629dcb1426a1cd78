"""Inference services end to end on the local executor: real model servers behind the router.

The embedding service serves the packaged all-MiniLM-L6-v2; the chat service a tiny random
Llama built by the test (``kiban.testing.models``), loaded through the same code as any model.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from e2e_support import KibanServer, eventually, readable_dir, remove_fresh, server_factory

from kiban.testing.models import build_tiny_causal_lm, embedding_model_path

pytestmark = pytest.mark.e2e

LOAD_TIMEOUT = 180.0  # a model server's start on a loaded 2-core machine


def service_manifest(name: str, model: str, uri: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kiban/v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {
            "model": {"name": model, "storageUri": uri},
            "resources": {"gpu": 0, "cpu": 0.5, "memory": "1Gi"},
            **spec,
        },
    }


def serve(kiban: KibanServer, manifest: dict[str, Any], file: str) -> str:
    path = kiban.workdir / file
    path.write_text(yaml.safe_dump(manifest))
    return kiban.ok("serve", path).strip()


def describe(kiban: KibanServer, name: str) -> dict[str, Any]:
    found: dict[str, Any] = kiban.json("describe", "service", name)
    return found


def wait_for(kiban: KibanServer, name: str, what: str, check: Any) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        service = kiban.client.service(name)
        return service if check(service) else None

    return eventually(probe, timeout=LOAD_TIMEOUT, interval=0.5, what=f"{name}: {what}")


def revision_states(service: dict[str, Any]) -> dict[str, str]:
    return {r["name"]: r["state"] for r in service["revisions"]}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with server_factory(tmp_path_factory) as start:
        yield start(nodes=2, gpus_per_node=0)


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A tiny causal LM where the replicas' users can read it (as root: the tenant's user)."""
    models = readable_dir(tmp_path_factory, "models")
    yield build_tiny_causal_lm(models / "tiny-llama")
    remove_fresh(models)


def test_an_embedding_service_answers_through_its_url_with_the_tenants_token(
    served: KibanServer,
) -> None:
    uri = f"file://{embedding_model_path()}"
    url = serve(served, service_manifest("embedder", "minilm", uri), "embedder.yaml")
    service = wait_for(served, "embedder", "Ready", lambda s: s["state"] == "Ready")
    assert service["url"] == url
    headers = {"Authorization": f"Bearer {served.token}"}
    body = {"model": "minilm", "input": ["a cat sits on the mat", "a kitten on a rug", "tax law"]}
    answer = httpx.post(f"{url}/openai/v1/embeddings", json=body, headers=headers, timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-kiban-revision"] == "embedder-00001"
    vectors = [item["embedding"] for item in answer.json()["data"]]
    assert [len(v) for v in vectors] == [384, 384, 384]

    def cosine(a: list[float], b: list[float]) -> float:
        return sum(x * y for x, y in zip(a, b, strict=True))  # the model normalizes

    assert cosine(vectors[0], vectors[1]) > cosine(vectors[0], vectors[2])
    # Open Inference Protocol v2 through the same URL.
    ready = httpx.get(f"{url}/v2/models/minilm/ready", headers=headers, timeout=30)
    assert ready.status_code == 200
    # Without a token (the service is not public): refused by the router.
    refused = httpx.post(f"{url}/openai/v1/embeddings", json=body, timeout=30)
    assert refused.status_code == 401
    shown = describe(served, "embedder")
    assert shown["stats"]["requests"] >= 2
    assert shown["replicas"][0]["ready"] is True
    # The local executor offered the model server a Unix socket, and it listens there (so the
    # router reaches it over the socket, not loopback TCP).
    assert any(path.is_socket() for path in (served.home / "jobs").glob("*/attempt-*/rank-0.sock"))


def test_chat_streams_canary_splits_promotes_and_a_bad_revision_fails(
    served: KibanServer, tiny_lm: Path
) -> None:
    manifest = service_manifest("chat", "tiny", f"file://{tiny_lm}", public=True)
    url = serve(served, manifest, "chat.yaml")
    wait_for(served, "chat", "Ready", lambda s: s["state"] == "Ready")
    # Streaming chat passes through the router as server-sent events.
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": 8,
        "stream": True,
    }
    with httpx.stream("POST", f"{url}/openai/v1/chat/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [line for line in r.iter_lines() if line.startswith("data:")]
    assert events[-1] == "data: [DONE]"
    assert json.loads(events[0].removeprefix("data:"))["object"] == "chat.completion.chunk"
    # kiban chat: the terminal client streams a reply and ends at an empty line.
    chatted = served.cli("chat", "chat", input="hello there\n\n", timeout=120)
    assert chatted.returncode == 0, chatted.stderr
    assert chatted.stdout.strip()

    # A new revision at 50%: once ready, both revisions serve.
    manifest["spec"]["model"]["args"] = ["--dtype", "float32"]
    manifest["spec"]["canaryTrafficPercent"] = 50
    serve(served, manifest, "chat.yaml")
    wait_for(
        served,
        "chat",
        "the canary to take its share",
        lambda s: s["traffic"] == {"chat-00001": 50, "chat-00002": 50},
    )
    plain = {"model": "tiny", "prompt": "one", "max_tokens": 2}
    seen = Counter(
        httpx.post(f"{url}/openai/v1/completions", json=plain, timeout=60).headers[
            "x-kiban-revision"
        ]
        for _ in range(40)
    )
    assert set(seen) == {"chat-00001", "chat-00002"}
    assert min(seen.values()) >= 8  # about half each (seeded neither way)

    served.ok("promote", "chat")
    service = wait_for(
        served, "chat", "the old revision to retire", lambda s: s["traffic"] == {"chat-00002": 100}
    )
    assert revision_states(service)["chat-00001"] == "Retired"
    answer = httpx.post(f"{url}/openai/v1/completions", json=plain, timeout=60)
    assert answer.headers["x-kiban-revision"] == "chat-00002"

    # A model path that does not exist here is refused at once, naming it; nothing changes.
    manifest["spec"]["model"]["storageUri"] = "file:///nonexistent/model"
    (served.workdir / "chat.yaml").write_text(yaml.safe_dump(manifest))
    refused = served.cli("serve", served.workdir / "chat.yaml")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert (
        "spec.model.storageUri: file:///nonexistent/model: /nonexistent/model does not "
        "exist on this machine" in refused.stderr
    ), refused.stderr
    assert [r["name"] for r in served.client.service("chat")["revisions"]] == [
        "chat-00001",
        "chat-00002",
    ]
    # A revision whose model cannot load fails with the loader's message; traffic stays.
    empty = served.workdir / "not-a-model"
    empty.mkdir()
    manifest["spec"]["model"]["storageUri"] = f"file://{empty}"
    serve(served, manifest, "chat.yaml")
    service = wait_for(
        served,
        "chat",
        "the broken revision to fail",
        lambda s: revision_states(s).get("chat-00003") == "Failed",
    )
    failed = next(r for r in service["revisions"] if r["name"] == "chat-00003")
    assert str(empty) in failed["message"]
    assert service["traffic"] == {"chat-00002": 100}
    answer = httpx.post(f"{url}/openai/v1/completions", json=plain, timeout=60)
    assert answer.status_code == 200
    assert answer.headers["x-kiban-revision"] == "chat-00002"

    # kiban rollback with no canary brings back the revision before the stable one.
    rolled = served.cli("rollback", "chat")
    assert rolled.returncode == 0, rolled.stderr
    assert rolled.stderr.splitlines() == [
        "service chat rolled back: revision chat-00001 comes back and takes all traffic once it "
        "is ready",
        "traffic: chat-00002 100% (until it is ready)",
    ]
    wait_for(
        served,
        "chat",
        "the earlier revision to take the traffic back",
        lambda s: s["traffic"] == {"chat-00001": 100},
    )
    answer = httpx.post(f"{url}/openai/v1/completions", json=plain, timeout=60)
    assert answer.headers["x-kiban-revision"] == "chat-00001"
    listed = served.ok("services")
    assert "chat" in listed and "chat-00001" in listed


def test_a_replica_that_dies_is_replaced(served: KibanServer, tiny_lm: Path) -> None:
    url = serve(
        served,
        service_manifest("solo", "tiny", f"file://{tiny_lm}", public=True),
        "solo.yaml",
    )
    service = wait_for(served, "solo", "Ready", lambda s: s["state"] == "Ready")
    first = service["replicas"][0]["job"]
    pids = [
        p.pid
        for p in served.replica_processes()
        if p.environ().get("KIBAN_JOB_ID") == first
        and "kiban.executors.local.shim" not in " ".join(p.cmdline())
    ]
    assert pids
    # A request in flight when the model server dies: frozen first, so the request is surely
    # sent and unanswered, then killed (its shim, which records the exit, stays).
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    plain = {"model": "tiny", "prompt": "again", "max_tokens": 2}
    answered: list[tuple[int, float]] = []

    def call() -> None:
        answer = httpx.post(f"{url}/openai/v1/completions", json=plain, timeout=120)
        answered.append((answer.status_code, time.monotonic()))

    caller = threading.Thread(target=call)
    caller.start()
    eventually(
        lambda: describe(served, "solo")["stats"]["inFlight"] == 1,
        timeout=30,
        what="the request to be in flight",
    )
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    killed_at = time.monotonic()
    caller.join(timeout=60)
    assert answered, "the in-flight request hung"
    status, at = answered[0]
    assert status in (502, 503)
    assert at - killed_at < 5.0  # fails fast, not at the 10-minute timeout
    service = wait_for(
        served,
        "solo",
        "a new ready replica",
        lambda s: s["state"] == "Ready" and s["replicas"][0]["job"] != first,
    )
    assert httpx.post(f"{url}/openai/v1/completions", json=plain, timeout=60).status_code == 200
    served.ok("delete", "service", "solo")
    eventually(
        lambda: "solo" not in {s["name"] for s in served.client.services()},
        timeout=60,
        what="the deleted service to go",
    )


def test_scale_to_zero_then_a_request_waits_while_a_replica_starts(
    served: KibanServer, tiny_lm: Path
) -> None:
    url = serve(
        served,
        service_manifest("lazy", "tiny", f"file://{tiny_lm}", public=True, minReplicas=0),
        "lazy.yaml",
    )
    wait_for(served, "lazy", "Ready", lambda s: s["state"] == "Ready")  # initial scale: one
    # No traffic: after Knative's 30 s grace period the last replica goes.
    wait_for(served, "lazy", "no replica", lambda s: s["replicas"] == [])
    assert served.client.service("lazy")["state"] == "ScaledToZero"
    plain = {"model": "tiny", "prompt": "wake up", "max_tokens": 2}
    answer = httpx.post(f"{url}/openai/v1/completions", json=plain, timeout=LOAD_TIMEOUT)
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-kiban-revision"] == "lazy-00001"
    served.ok("delete", "service", "lazy")


def test_a_custom_runtime_serves_any_http_command(
    served: KibanServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    site = readable_dir(tmp_path_factory, "site")
    (site / "v2" / "models" / "echo").mkdir(parents=True)
    (site / "v2" / "models" / "echo" / "ready").write_text("yes\n")
    port = free_port()
    manifest = {
        "apiVersion": "kiban/v1",
        "kind": "Service",
        "metadata": {"name": "static"},
        "spec": {
            "runtime": "custom",
            "command": ["python", "-m", "http.server", str(port), "--directory", str(site)],
            "port": port,
            "readinessPath": "/v2/models/echo/ready",
            "resources": {"cpu": 0.5, "memory": "256Mi"},
            "public": True,
        },
    }
    url = serve(served, manifest, "static.yaml")
    wait_for(served, "static", "Ready", lambda s: s["state"] == "Ready")
    answer = httpx.get(f"{url}/v2/models/echo/ready", timeout=30)
    assert (answer.status_code, answer.text) == (200, "yes\n")
    assert answer.headers["x-kiban-revision"] == "static-00001"
    served.ok("delete", "service", "static")


BUSY_SERVER = """
import http.server, os, threading, time
def work():  # a fifth of a core, all the time: the replica's requested CPU, fully used
    while True:
        end = time.perf_counter() + 0.02
        while time.perf_counter() < end:
            pass
        time.sleep(0.08)
threading.Thread(target=work, daemon=True).start()
class Ready(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *args):
        pass
address = ("127.0.0.1", int(os.environ["MASTER_PORT"]))
http.server.ThreadingHTTPServer(address, Ready).serve_forever()
"""


def test_a_service_scaled_on_cpu_adds_replicas_when_they_are_busy(
    served: KibanServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """scaleMetric cpu, target 50% of 200m: a replica busy at its whole request makes the
    autoscaler ask for another, from the CPU its processes used (no request is sent)."""
    site = readable_dir(tmp_path_factory, "busy")
    (site / "busy.py").write_text(BUSY_SERVER)
    manifest = {
        "apiVersion": "kiban/v1",
        "kind": "Service",
        "metadata": {"name": "busy"},
        "spec": {
            "runtime": "custom",
            "command": ["python", str(site / "busy.py")],
            "readinessPath": "/ready",
            "resources": {"cpu": "200m", "memory": "256Mi"},
            "scaleMetric": "cpu",
            "scaleTarget": 50,
            "minReplicas": 1,
            "maxReplicas": 2,
        },
    }
    serve(served, manifest, "busy.yaml")
    service = wait_for(
        served,
        "busy",
        "two ready replicas",
        lambda s: sum(1 for r in s["replicas"] if r["ready"]) == 2,
    )
    assert service["scaleMetric"] == "cpu"
    (revision,) = describe(served, "busy")["revisions"]
    scaling = revision["scaling"]
    assert (scaling["metric"], scaling["perReplica"]) == ("cpu", 0.5)
    assert scaling["stableValue"] > 0.5  # busier than one replica's target: hence two
    assert "AUTOSCALER" in served.ok("describe", "service", "busy")
    served.ok("delete", "service", "busy")


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
