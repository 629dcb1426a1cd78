"""``kiban up --backend kubernetes --kubeconfig FILE`` as a real process on the kube tier: a job
submitted through the API runs as pods and succeeds, and a crash of kiban mid-job (SIGKILL)
loses nothing: the restarted process adopts the pods, starting none twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kube_platform import empty_the_cluster, job_pods, manifest
from kube_support import eventually

from kiban.devtools.kube import ControlPlane
from kiban.sdk.client import Client

pytestmark = pytest.mark.kube


class Up:
    """One ``kiban up --backend kubernetes`` process with its home, and an SDK client."""

    def __init__(self, home: Path, kubeconfig: Path) -> None:
        self.home = home
        self.kubeconfig = kubeconfig
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Client:
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "url").unlink(missing_ok=True)
        argv = [sys.executable, "-m", "kiban.cli.main", "up", "--home", str(self.home)]
        argv += ["--port", "0", "--backend", "kubernetes", "--kubeconfig", str(self.kubeconfig)]
        argv += ["--image", "registry.example/train:1"]
        with open(self.home / "server.log", "ab") as log:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=os.environ.copy(),
            )
        eventually(
            self._healthy, what=f"kiban up to serve (log: {self.home / 'server.log'})", timeout=90
        )
        url = (self.home / "url").read_text().strip()
        return Client(url=url, token=(self.home / "token").read_text().strip())

    def _healthy(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(
                f"kiban up exited: {(self.home / 'server.log').read_text()[-3000:]}"
            )
        try:
            url = (self.home / "url").read_text().strip()
            return bool(url) and httpx.get(f"{url}/healthz", timeout=2).status_code == 200
        except (OSError, httpx.HTTPError):
            return False

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)


@pytest.fixture
def up(control_plane: ControlPlane, core: Any, tmp_path: Path) -> Iterator[Up]:
    empty_the_cluster(core)
    server = Up(tmp_path / "home", control_plane.kubeconfig)
    try:
        yield server
    finally:
        server.stop(signal.SIGKILL)
        empty_the_cluster(core)


def test_kiban_up_on_kubernetes_runs_a_job_to_success(up: Up, core: Any) -> None:
    api = up.start()
    try:
        nodes = api.nodes()
        assert len(nodes) == 3 and all(n["gpus"] == 2 for n in nodes)
        job = api.submit(manifest("ddp", replicas=3, annotations={"kiban.dev/sim-duration": "2s"}))
        eventually(lambda: len(job_pods(core, job["id"])) == 3, what="the job's pods")
        eventually(lambda: api.job(job["id"])["state"] == "Succeeded", what="the job to succeed")
    finally:
        api.close()


def test_a_crash_of_kiban_mid_job_loses_and_duplicates_nothing(up: Up, core: Any) -> None:
    api = up.start()
    job_id = api.submit(manifest("long", replicas=3))["id"]
    eventually(lambda: api.job(job_id)["state"] == "Running", what="the job to run")
    before = {p.metadata.uid for p in job_pods(core, job_id)}
    assert len(before) == 3
    api.close()
    up.stop(signal.SIGKILL)

    api = up.start()
    try:
        assert api.job(job_id)["state"] == "Running"
        # Passes later (a job submitted after the restart has started): the same three pods.
        probe = api.submit(manifest("probe", gpu=0))["id"]
        eventually(lambda: api.job(probe)["state"] == "Running", what="a job after the restart")
        assert {p.metadata.uid for p in job_pods(core, job_id)} == before
        assert b"".join(api.logs(job_id, rank=0)) == b""  # KWOK's pods have no logs
        api.cancel(job_id)
        eventually(lambda: api.job(job_id)["state"] == "Cancelled", what="the cancel")
        eventually(lambda: not job_pods(core, job_id), what="its pods to be deleted")
    finally:
        api.close()
