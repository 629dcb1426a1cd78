"""kiban's pods as the API last reported them, kept current by a watch on its own thread.

The cache lists the pods once, then watches from the list's resourceVersion, resuming after
each timeout or dropped connection from the last resourceVersion it saw (bookmarks included);
when the API answers 410 Gone (that version was compacted away) it lists again. Readers never
wait for the API: ``observe`` is called for every replica on every control-loop pass.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from kiban.executors.kubernetes.api import CoreApi

log = logging.getLogger("kiban.executors.kubernetes")

Pod = dict[str, Any]
Key = tuple[str, str]  # (namespace, name)


def key_of(pod: Pod) -> Key:
    meta = pod.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def _version(pod: Pod) -> int:
    try:
        return int((pod.get("metadata") or {}).get("resourceVersion", "0"))
    except ValueError:
        return 0


class Gone(Exception):
    """The watch's resourceVersion is too old (HTTP 410): list again."""


class PodCache:
    """Pods matching ``selector`` in every namespace, by (namespace, name)."""

    def __init__(self, api: CoreApi, selector: str, watch_timeout_s: int = 60) -> None:
        self._api = api
        self._selector = selector
        self._timeout_s = watch_timeout_s
        self._pods: dict[Key, Pod] = {}
        self._lock = threading.Lock()
        self._version: str | None = None
        self._stopping = threading.Event()
        self._response: Any = None
        self._thread: threading.Thread | None = None
        self.relists = 0  # how many times the cache listed (1 + each 410 Gone)
        self.on_change: Callable[[], None] | None = None

    # -- reading -------------------------------------------------------------------------------
    def get(self, namespace: str, name: str) -> Pod | None:
        with self._lock:
            return self._pods.get((namespace, name))

    def select(self, labels: dict[str, str]) -> list[Pod]:
        """The cached pods carrying all of ``labels``."""
        with self._lock:
            pods = list(self._pods.values())
        return [
            p
            for p in pods
            if all((p["metadata"].get("labels") or {}).get(k) == v for k, v in labels.items())
        ]

    def __len__(self) -> int:
        with self._lock:
            return len(self._pods)

    # -- writing -------------------------------------------------------------------------------
    def put(self, pod: Pod) -> None:
        """Record a pod (from the watch, or as a create call returned it), unless older."""
        key = key_of(pod)
        with self._lock:
            known = self._pods.get(key)
            if known is None or _version(known) <= _version(pod) or _uid(known) != _uid(pod):
                self._pods[key] = pod

    def remove(self, pod: Pod) -> None:
        key = key_of(pod)
        with self._lock:
            known = self._pods.get(key)
            if known is not None and _uid(known) == _uid(pod):
                del self._pods[key]

    # -- the watch -----------------------------------------------------------------------------
    def start(self) -> None:
        """List now (so that readers see every pod at once), then watch on a thread."""
        self.relist()
        self._thread = threading.Thread(target=self._run, name="kiban-pod-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        response = self._response
        if response is not None:
            with contextlib.suppress(Exception):  # already closed
                response.shutdown()  # interrupts the thread's blocking read
        if self._thread is not None:
            self._thread.join(timeout=10)

    def relist(self) -> None:
        data = self._api.list_pods(label_selector=self._selector)
        pods = {key_of(p): p for p in data.get("items") or []}
        for pod in pods.values():  # list items carry no kind; watch events do
            pod.setdefault("kind", "Pod")
        with self._lock:
            self._pods = pods
            self._version = data["metadata"]["resourceVersion"]
        self.relists += 1
        self._changed()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                started = time.monotonic()
                if self._watch_once() == 0 and time.monotonic() - started < 1.0:
                    self._stopping.wait(1.0)  # a watch closed at once: do not spin on the API
            except Gone:
                log.info("pod watch: resourceVersion %s is gone; listing again", self._version)
                self._relist_until_done()
            except Exception as exc:
                if self._stopping.is_set():
                    return
                log.warning("pod watch interrupted (%s); resuming", exc)
                self._stopping.wait(0.5)

    def _relist_until_done(self) -> None:
        while not self._stopping.is_set():
            try:
                self.relist()
                return
            except Exception as exc:
                log.warning("pod list failed (%s); retrying", exc)
                self._stopping.wait(1.0)

    def _watch_once(self) -> int:
        """Watch until the server ends the watch; the number of events seen."""
        try:
            response = self._api.watch_pods(self._selector, self._version, self._timeout_s)
        except ApiException as exc:
            if exc.status == 410:
                raise Gone() from exc
            raise
        self._response = response
        seen = 0
        try:
            for line in iter_resp_lines(response):  # type: ignore[no-untyped-call]
                if self._stopping.is_set():
                    break
                self._apply(json.loads(line))
                seen += 1
        finally:
            self._response = None
            response.release_conn()
        return seen

    def _apply(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone()
            raise RuntimeError(f"watch error: {obj.get('message', obj)}")
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if kind in ("ADDED", "MODIFIED"):
            self.put(obj)
        elif kind == "DELETED":
            self.remove(obj)
        if version:
            self._version = version
        if kind != "BOOKMARK":
            self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()


def _uid(pod: Pod) -> str:
    return str((pod.get("metadata") or {}).get("uid", ""))
