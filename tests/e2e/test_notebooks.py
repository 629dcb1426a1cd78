"""A notebook end to end on the local executor: real JupyterLab behind kiban's /nb/ route.

Start one with 1 GPU and a 20 s idle timeout; run a cell through the route (a kernel made by
REST, an ``execute_request`` over its websocket); a busy kernel is not culled; once idle it is,
its GPU freed; ``kiban notebook start`` brings it back with its files.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx
import pytest
from e2e_support import KibanServer, eventually

from kiban.bench.kernel import Executed, KernelClient

pytestmark = pytest.mark.e2e

START_TIMEOUT = 90.0  # JupyterLab's start on a loaded 2-core machine


def execute(base: str, token: str, code: str, timeout: float = 60.0) -> Executed:
    """Run ``code`` in a new kernel through the route (kernel REST, then its websocket)."""
    headers = {"Authorization": f"Bearer {token}"}
    with KernelClient(base, headers, timeout_s=timeout).start() as kernel:
        return kernel.execute(code)


def test_notebook_runs_a_cell_through_the_route_is_culled_when_idle_and_comes_back(
    kiban: KibanServer,
) -> None:
    admin = httpx.Client(base_url=kiban.url, headers={"Authorization": f"Bearer {kiban.token}"})
    assert admin.post("/api/v1/tenants", json={"name": "lab"}).status_code == 201
    queue = {"name": "lab-q", "tenant": "lab", "quota": {"gpu": 2}}
    assert admin.post("/api/v1/queues", json=queue).status_code == 201
    token = admin.post("/api/v1/tenants/lab/tokens", json={"name": "ada"}).json()["token"]
    env = {"KIBAN_URL": kiban.url, "KIBAN_TOKEN": token}

    out = kiban.ok("notebook", "start", "nb", "--gpus", "1", "--idle-timeout", "20s", env=env)
    base = f"{kiban.url}/nb/lab/nb/"
    assert base in out

    def state(wanted: str) -> dict[str, Any] | None:
        found = json.loads(kiban.ok("notebook", "ls", "-o", "json", env=env))
        return found[0] if found and found[0]["state"] == wanted else None

    eventually(lambda: state("Running"), timeout=START_TIMEOUT, interval=0.5, what="Running")
    with KernelClient(base, {"Authorization": f"Bearer {token}"}).start() as kernel:
        assert kernel._socket is not None
        # not compressed: a kernel message each way would cost both ends a deflate
        assert "sec-websocket-extensions" not in kernel._socket.response.headers
        result = kernel.execute("open('kept.txt', 'w').write('from the first run'); print(6 * 7)")
    assert (result.status, result.stdout) == ("ok", "42\n")

    # A kernel executing for longer than the idle timeout keeps the notebook.
    busy: list[Executed] = []
    worker = threading.Thread(
        target=lambda: busy.append(execute(base, token, "import time; time.sleep(25)", 90))
    )
    worker.start()
    worker.join(timeout=90)
    assert [done.status for done in busy] == ["ok"], busy
    assert state("Running") is not None, "a notebook with a busy kernel was culled"

    stopped = eventually(lambda: state("Stopped"), timeout=60, interval=0.5, what="culled")
    assert "idleTimeout" in stopped["reason"]
    events = admin.get(f"/api/v1/jobs/{stopped['jobId']}/events").json()
    assert "Culled" in [e["reason"] for e in events]

    def gpus_free() -> bool | None:
        nodes = admin.get("/api/v1/nodes").json()
        return sum(n["gpusInUse"] for n in nodes) == 0 or None

    eventually(gpus_free, timeout=30, interval=0.5, what="its GPU freed")

    kiban.ok("notebook", "start", "nb", env=env)
    eventually(lambda: state("Running"), timeout=START_TIMEOUT, interval=0.5, what="back")
    again = execute(base, token, "print(open('kept.txt').read())")
    assert again.stdout == "from the first run\n"
    kiban.ok("notebook", "stop", "nb", env=env)
