"""The client side of ``kiban bench kube``: pods created many at a time, a watch that times
when they all run, and emptying the cluster between phases.

Everything goes through kiban's own API layer (:class:`~kiban.executors.kubernetes.api.CoreApi`,
the official client with JSON in and out), so the raw creation rate is that of the client
kiban itself uses.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from kiban.bench.loadgen import BenchError
from kiban.executors.kubernetes.api import CoreApi, Obj, connect

RUNNING = "Running"


@contextlib.contextmanager
def core_api(kubeconfig: Path, pool: int) -> Iterator[CoreApi]:
    """kiban's API layer on kubeconfig with ``pool`` keep-alive connections; closed on exit."""
    api = CoreApi(connect(kubeconfig, pool=pool))
    try:
        yield api
    finally:
        api.close()


def create_pods(api: CoreApi, namespace: str, bodies: list[Obj], workers: int) -> float:
    """Create every pod, ``workers`` requests in flight; the seconds it took."""
    started = time.perf_counter()
    with ThreadPoolExecutor(max(1, workers), thread_name_prefix="bench-create") as pool:
        for _ in pool.map(lambda body: api.create_pod(namespace, body), bodies):
            pass
    return time.perf_counter() - started


@dataclass
class WatchResult:
    """What a watch saw of a phase's pods, by pod uid: when each was first seen (created) and
    first seen Running (``time.monotonic``: one clock for every process), its node and when
    it was first seen bound to it."""

    target: int
    seen: dict[str, float] = field(default_factory=dict)
    running: dict[str, float] = field(default_factory=dict)
    nodes: dict[str, str] = field(default_factory=dict)
    bound: dict[str, float] = field(default_factory=dict)  # when first seen with a node

    def apply(self, event: dict[str, Any], at: float) -> bool:
        """Note one watch event seen at ``at``; True once ``target`` pods have run."""
        if event.get("type") in ("ADDED", "MODIFIED"):
            obj = event.get("object") or {}
            uid = (obj.get("metadata") or {}).get("uid", "")
            self.seen.setdefault(uid, at)
            node = (obj.get("spec") or {}).get("nodeName")
            if node:
                self.nodes[uid] = node
                self.bound.setdefault(uid, at)
            if (obj.get("status") or {}).get("phase") == RUNNING:
                self.running.setdefault(uid, at)
        return len(self.running) >= self.target

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))


def watch_until_running(api: CoreApi, selector: str, target: int, timeout: float) -> WatchResult:
    """List (nothing may match yet), say "ready" on stdout, then watch until ``target`` pods
    matching ``selector`` have been seen Running, or ``timeout`` seconds."""
    listed = api.list_pods(label_selector=selector)
    if listed.get("items"):
        raise BenchError(f"{len(listed['items'])} pods match {selector} already")
    version = listed["metadata"]["resourceVersion"]
    result = WatchResult(target)
    print("ready", flush=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        response = api.watch_pods(selector, version, max(1, int(deadline - time.monotonic())))
        try:
            for line in iter_resp_lines(response):  # type: ignore[no-untyped-call]
                event = json.loads(line)
                meta = (event.get("object") or {}).get("metadata") or {}
                version = meta.get("resourceVersion", version)
                if result.apply(event, time.monotonic()):
                    return result
        finally:
            response.release_conn()
    return result


class RunningWatch:
    """A watch, in a process of its own (``python -m kiban.bench.kubewatch``), of the pods
    matching a selector until ``target`` of them are Running. Started before a phase begins,
    so that it misses none of its events; decoding them takes none of this process's CPU time
    or interpreter lock."""

    def __init__(self, kubeconfig: Path, selector: str, target: int, timeout: float) -> None:
        self.timeout = timeout
        self._argv = [
            sys.executable,
            "-m",
            "kiban.bench.kubewatch",
            str(kubeconfig),
            selector,
            str(target),
            str(timeout),
        ]
        self._process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        self._process = subprocess.Popen(
            self._argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True
        )
        line = self._process.stdout.readline() if self._process.stdout else ""
        if line.strip() != "ready":
            self.stop()
            raise BenchError(f"the pod watch did not start: {line.strip() or 'no answer'}")

    def wait(self) -> WatchResult:
        """Block until the target is Running (or the watch's timeout); what the watch saw."""
        assert self._process is not None and self._process.stdout is not None
        line = self._process.stdout.readline()
        try:
            data = json.loads(line)
        except ValueError:
            raise BenchError(f"the pod watch failed: {line.strip() or 'no answer'}") from None
        if "error" in data:
            raise BenchError(f"the pod watch failed: {data['error']}")
        result = WatchResult(**data)
        if len(result.running) < result.target:
            raise BenchError(
                f"only {len(result.running)} of {result.target} pods Running after "
                f"{self.timeout:.0f} s ({len(result.seen)} created)"
            )
        return result

    def stop(self) -> None:
        if self._process is None:
            return
        if self._process.poll() is None:
            self._process.terminate()
        self._process.wait(timeout=10)
        if self._process.stdout is not None:
            self._process.stdout.close()


def empty_cluster(api: CoreApi, timeout: float = 300.0) -> None:
    """Delete every pod at once (grace 0) and kiban's Services; wait until no pod is left.

    No garbage collector runs on the local control plane, so nothing else would. Namespaces
    stay: without a namespace controller a deleted one would be Terminating for ever.
    """
    from kubernetes import client

    core: Any = client.CoreV1Api(api.api_client)  # collection deletes: only the bench makes them
    deadline = time.monotonic() + timeout
    while True:
        pods = api.list_pods().get("items") or []
        if not pods:
            break
        for namespace in sorted({p["metadata"]["namespace"] for p in pods}):
            with contextlib.suppress(ApiException):
                core.delete_collection_namespaced_pod(
                    namespace, grace_period_seconds=0, _preload_content=False
                )
        if time.monotonic() > deadline:
            raise BenchError(f"{len(pods)} pods still there after {timeout:.0f} s")
        time.sleep(0.2)
    for service in api.list_services("app.kubernetes.io/managed-by=kiban"):
        meta = service["metadata"]
        with contextlib.suppress(ApiException):
            core.delete_namespaced_service(meta["name"], meta["namespace"], _preload_content=False)


def ensure_namespace(api: CoreApi, name: str) -> None:
    """Create a namespace unless it exists."""
    try:
        api.create_namespace({"metadata": {"name": name}})
    except ApiException as exc:
        if exc.status != 409:
            raise
