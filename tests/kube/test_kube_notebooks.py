"""A notebook on kiban's Kubernetes executor, against the real API server: ``start`` places a
pod on a KWOK node (JupyterLab's command on the pod's own address, its port, the notebook's
volume claim mounted as its directory, its GPUs as limits, its job at the interactive class);
the notebook goes Running once its server answers; ``/nb/<tenant>/<name>/`` reaches the pod's
address; ``stop`` deletes the pod and keeps the claim, and a new start mounts the same claim.

KWOK's pods have no network, so the test gives the pod a loopback address of its own through
its status (``status.podIP``, as a kubelet reports it) and serves a fake Jupyter there, on the
port kiban gave the job.
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from kube_platform import empty_the_cluster, env_of, get, kube_platform
from kube_support import eventually

from kiban.api.app import create_app
from kiban.devtools.kube import ControlPlane
from kiban.platform import Platform

pytestmark = pytest.mark.kube

NAMESPACE = "kiban-vision"
SELECTOR = "kiban.dev/notebook=lab"


class FakeJupyter(BaseHTTPRequestHandler):
    """Answers as JupyterLab does under ``/nb/vision/lab/``; records what reached it."""

    seen: list[tuple[str, str]] = []

    def do_GET(self) -> None:
        self.seen.append((self.path, self.headers.get("Authorization", "")))
        if self.path.startswith("/nb/vision/lab/api/status"):
            body: Any = {"last_activity": "2099-01-01T00:00:00Z", "connections": 0}
        elif self.path.startswith("/nb/vision/lab/api/kernels"):
            body = []
        elif self.path.startswith("/nb/vision/lab/api/contents"):
            body = {"name": "", "type": "directory", "content": []}
        else:
            self.send_error(404)
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def platform(control_plane: ControlPlane, core: Any, tmp_path: Path) -> Iterator[Platform]:
    empty_the_cluster(core)
    with kube_platform(control_plane, tmp_path / "home") as built:
        yield built


def live_pods(core: Any) -> list[Any]:
    pods = core.list_namespaced_pod(NAMESPACE, label_selector=SELECTOR).items
    return [p for p in pods if p.metadata.deletion_timestamp is None]


def notebook(alice: TestClient) -> dict[str, Any]:
    answer = alice.get("/api/v1/notebooks/lab")
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


@pytest.fixture
def jupyter() -> Iterator[tuple[str, list[tuple[str, str]]]]:
    """A loopback address of the pod's own (one of 127/8, so that no other test's port is in
    the way); the fake Jupyter is bound there once kiban has picked the port."""
    address = ".".join(["127", *(str(random.randrange(1, 255)) for _ in range(3))])
    FakeJupyter.seen = []
    yield address, FakeJupyter.seen


def test_a_notebook_is_a_pod_placed_by_kiban_and_reached_through_the_route(
    platform: Platform, core: Any, jupyter: tuple[str, list[tuple[str, str]]]
) -> None:
    admin = (platform.home / "token").read_text().strip()
    app = create_app(platform)
    with TestClient(app, headers={"Authorization": f"Bearer {admin}"}) as api:
        assert api.post("/api/v1/tenants", json={"name": "vision"}).status_code == 201
        queue = {"name": "vision-q", "tenant": "vision", "quota": {"gpu": 2}}
        assert api.post("/api/v1/queues", json=queue).status_code == 201
        answer = api.post("/api/v1/tenants/vision/tokens", json={"name": "alice"})
        token = answer.json()["token"]
    with TestClient(app, headers={"Authorization": f"Bearer {token}"}) as alice:
        body = {"name": "lab", "gpus": 1, "queue": "vision-q", "idleTimeout": "1h"}
        assert alice.post("/api/v1/notebooks", json=body).status_code == 201
        platform.loop.wake()
        pod = eventually(lambda: next(iter(live_pods(core)), None), what="the notebook's pod")
        job = get(platform, notebook(alice)["jobId"])
        assert job.spec["spec"]["priorityClass"] == "interactive"
        assert job.master_port is not None

        # the pod: on a KWOK node, JupyterLab's command on the pod's own address and the job's
        # port, its directory the notebook's own claim, its GPU a limit, Jupyter's token by env
        assert pod.spec.node_name in {n.metadata.name for n in core.list_node().items}
        container = pod.spec.containers[0]
        assert container.command[1:3] == ["-m", "kiban.web.jupyter_runtime"]
        assert "--ServerApp.ip=0.0.0.0" in container.command
        assert "--ServerApp.base_url=/nb/vision/lab/" in container.command
        assert "--ServerApp.root_dir=/kiban/notebooks/lab" in container.command
        env = env_of(pod, core)  # the token from the attempt's Secret
        assert env["MASTER_PORT"] == str(job.master_port) and len(env["JUPYTER_TOKEN"]) == 64
        assert [e.value for e in container.env if e.name == "JUPYTER_TOKEN"] == [None]
        assert not any(env["JUPYTER_TOKEN"] in arg for arg in container.command)
        assert container.resources.limits["nvidia.com/gpu"] == "1"
        [mount] = container.volume_mounts
        [volume] = pod.spec.volumes
        assert (mount.name, mount.mount_path) == (volume.name, "/kiban/notebooks/lab")
        claim_name = volume.persistent_volume_claim.claim_name
        claim = core.read_namespaced_persistent_volume_claim(claim_name, NAMESPACE)
        assert claim.metadata.labels["kiban.dev/notebook"] == "lab"
        assert claim.metadata.annotations["kiban.dev/owner"] == "alice"

        # not Running while its server does not answer (KWOK's pods run nothing)
        assert notebook(alice)["state"] == "Starting"
        refused = alice.get("/nb/vision/lab/api/contents")
        assert refused.status_code == 503 and "Starting" in refused.json()["error"]["message"]

        # the pod's address, as a kubelet reports it: the fake Jupyter answers there
        address, seen = jupyter
        server = ThreadingHTTPServer((address, job.master_port), FakeJupyter)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            status = [  # a JSON patch: a strategic merge would add to podIPs, not replace it
                {"op": "replace", "path": "/status/podIP", "value": address},
                {"op": "replace", "path": "/status/podIPs", "value": [{"ip": address}]},
            ]
            core.patch_namespaced_pod_status(pod.metadata.name, NAMESPACE, status)
            eventually(lambda: notebook(alice)["state"] == "Running", what="Running")
            assert seen and seen[0][1] == f"token {env['JUPYTER_TOKEN']}"  # the readiness probe

            through = alice.get("/nb/vision/lab/api/contents?type=directory")
            assert through.status_code == 200, through.text
            assert through.json()["type"] == "directory"
            assert seen[-1] == (
                "/nb/vision/lab/api/contents?type=directory",
                f"token {env['JUPYTER_TOKEN']}",
            )
        finally:
            server.shutdown()
            server.server_close()

        # stop: the pod goes, the claim stays; a new start mounts the same claim
        assert alice.post("/api/v1/notebooks/lab/stop").status_code == 200
        platform.loop.wake()
        eventually(lambda: not live_pods(core), what="no pod")
        assert core.read_namespaced_persistent_volume_claim(claim_name, NAMESPACE)
        eventually(lambda: notebook(alice)["state"] == "Stopped", what="Stopped")
        assert alice.post("/api/v1/notebooks", json={"name": "lab"}).status_code in (200, 201)
        platform.loop.wake()
        again = eventually(lambda: next(iter(live_pods(core)), None), what="the notebook's pod")
        assert again.metadata.uid != pod.metadata.uid
        assert again.spec.volumes[0].persistent_volume_claim.claim_name == claim_name
        assert alice.post("/api/v1/notebooks/lab/stop").status_code == 200
