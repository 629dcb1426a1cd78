"""What the Kubernetes executor's unit tests share: an executor over a scripted stand-in for the
API, with no pod watch (the executor then reads each pod itself)."""

from __future__ import annotations

from typing import Any

import pytest

from kiban.executors.kubernetes import KubernetesOptions, executor
from kiban.executors.kubernetes.executor import KubernetesExecutor

Obj = dict[str, Any]
OPTIONS = KubernetesOptions(default_image="img:1")


class NoCache:
    """The pod cache with no watch: it keeps what the executor puts and finds nothing."""

    def __init__(self, *args: Any) -> None:
        self.pods: list[Obj] = []

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def put(self, pod: Obj) -> None:
        self.pods.append(pod)

    def get(self, namespace: str, name: str) -> Obj | None:
        return None  # not seen by a watch: the executor reads the pod itself


def executor_over(
    monkeypatch: pytest.MonkeyPatch,
    api: object,
    options: KubernetesOptions = OPTIONS,
    **extra: Any,
) -> KubernetesExecutor:
    """An executor whose API is ``api`` and whose pod cache is a ``NoCache`` (``extra``: the
    executor's other arguments, a clock)."""
    monkeypatch.setattr(executor, "CoreApi", lambda _client: api)
    monkeypatch.setattr(executor, "PodCache", NoCache)
    return KubernetesExecutor(object(), options, **extra)  # type: ignore[arg-type]
