"""Helpers of the kube tier: pods as the tests create them, and waiting on what KWOK does."""

from __future__ import annotations

import time
import uuid
from functools import partial
from typing import Any

from kiban import testing

NAMESPACE = "default"

# kiban.testing's, with the tier's deadline: KWOK and the API server take seconds
eventually = partial(testing.eventually, timeout=30.0)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def pod_body(
    name: str,
    node: str | None,
    *,
    annotations: dict[str, str] | None = None,
    restart_policy: str = "Never",
    gpus: int = 1,
) -> dict[str, Any]:
    """A one-container pod bound to node by nodeName (None: left to a scheduler)."""
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "restartPolicy": restart_policy,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/train:1",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ],
        },
    }
    if node is not None:
        body["spec"]["nodeName"] = node
    return body


def watch_phases(
    core: Any, name: str, until: set[str], timeout: float = 30.0
) -> list[tuple[float, str]]:
    """Watch pod name; return (monotonic time, phase) at each phase change, up to one in until."""
    from kubernetes import watch

    seen: list[tuple[float, str]] = []
    watcher = watch.Watch()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for event in watcher.stream(
            core.list_namespaced_pod,
            NAMESPACE,
            field_selector=f"metadata.name={name}",
            timeout_seconds=max(1, int(deadline - time.monotonic())),
        ):
            phase = event["object"].status.phase
            if not seen or seen[-1][1] != phase:
                seen.append((time.monotonic(), phase))
            if phase in until:
                watcher.stop()
                return seen
    raise AssertionError(f"pod {name} reached none of {sorted(until)}; phases seen: {seen}")
