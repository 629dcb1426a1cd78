"""The pod cache's bookkeeping: watches resume from the last resourceVersion seen, and a 410
Gone (as an HTTP status or an ERROR event) makes it list again. A scripted stand-in for the API
plays the server here; the kube tier runs the cache against the real one."""

from __future__ import annotations

import json
import threading
from typing import Any

from kubernetes.client.exceptions import ApiException

from kiban.executors.kubernetes.podcache import PodCache


def pod(name: str, version: int, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "ns",
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": str(version),
        },
        "status": {"phase": phase},
    }


class Stream:
    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.data = b"".join(json.dumps(e).encode() + b"\n" for e in events)

    def stream(self, amt: Any = None, decode_content: bool = False) -> Any:
        yield self.data

    def release_conn(self) -> None:
        pass


class ScriptedApi:
    """Answers lists with ``pods`` and each watch with the next scripted outcome."""

    def __init__(
        self, pods: list[dict[str, Any]], watches: list[Any], cache: list[PodCache]
    ) -> None:
        self.pods = pods
        self.watches = watches
        self.watched_from: list[str | None] = []
        self.lists = 0
        self.cache = cache

    def list_pods(self, *, label_selector: str = "", field_selector: str = "") -> dict[str, Any]:
        self.lists += 1
        return {"metadata": {"resourceVersion": str(100 * self.lists)}, "items": list(self.pods)}

    def watch_pods(self, selector: str, version: str | None, timeout_s: int) -> Stream:
        self.watched_from.append(version)
        if not self.watches:
            self.cache[0]._stopping.set()
            return Stream([])
        outcome = self.watches.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return Stream(outcome)


def run(api: ScriptedApi, cache: PodCache) -> None:
    cache.relist()
    thread = threading.Thread(target=cache._run)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive()


def test_watches_resume_from_the_last_version_and_relist_after_410() -> None:
    holder: list[PodCache] = []
    api = ScriptedApi(
        [pod("a", 90)],
        [
            [
                {"type": "ADDED", "object": pod("b", 101)},
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "105"}}},
            ],
            [
                {"type": "MODIFIED", "object": pod("b", 106, "Succeeded")},
                {"type": "DELETED", "object": pod("a", 107)},
            ],
            [{"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}}],
            ApiException(status=410, reason="Gone"),
        ],
        holder,
    )
    cache = PodCache(api, "app=x")  # type: ignore[arg-type]
    holder.append(cache)
    run(api, cache)
    # list at 100; resume from the bookmark (105), then 107; 410 as an event: list (200);
    # 410 as a status: list (300); then from 300.
    assert api.watched_from == ["100", "105", "107", "200", "300"]
    assert api.lists == 3 and cache.relists == 3
    assert cache.get("ns", "a") is not None  # the last list has it again
    assert cache.get("ns", "b") is None  # the lists do not


def test_an_older_version_does_not_replace_a_newer_one() -> None:
    cache = PodCache(ScriptedApi([], [], []), "app=x")  # type: ignore[arg-type]
    cache.put(pod("a", 10, "Succeeded"))
    cache.put(pod("a", 9, "Running"))
    assert cache.get("ns", "a")["status"]["phase"] == "Succeeded"  # type: ignore[index]
