"""Write the agent's conditions on the Kubernetes Node object, as node-problem-detector does.

Each pass patches ``status.conditions`` (a strategic merge keyed by ``type``, so the kubelet's
and other agents' conditions stay) with NPD's fields: type, status, reason, message,
``lastTransitionTime`` and ``lastHeartbeatTime``. The Kubernetes executor's node view
(``executors/kubernetes/nodes.py``) reads them as it reads NPD's.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kiban.health.conditions import Condition

GPU_COUNT_LABEL = "kiban.io/gpu-count"
STRATEGIC_MERGE = "application/strategic-merge-patch+json"


def rfc3339(seconds: float) -> str:
    """Kubernetes' time format, to the second, in UTC."""
    moment = datetime.datetime.fromtimestamp(int(seconds), tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def node_condition(condition: Condition, now: float) -> dict[str, str]:
    """One condition in a Node's ``status.conditions`` shape."""
    return {
        "type": condition.type.value,
        "status": condition.status.value,
        "reason": condition.reason,
        "message": condition.message,
        "lastTransitionTime": rfc3339(condition.last_transition_time),
        "lastHeartbeatTime": rfc3339(now),
    }


def core_api(kubeconfig: Path | None) -> Any:
    """CoreV1Api from a kubeconfig, or in-cluster from the pod's service account."""
    from kubernetes import client, config

    if kubeconfig is not None:
        api_client = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
    else:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
        api_client = client.ApiClient()
    return client.CoreV1Api(api_client)


class NodeConditionWriter:
    """Patches each node's conditions; ``core`` is a ``kubernetes.client.CoreV1Api``."""

    def __init__(self, core: Any) -> None:
        self.core = core

    def write(self, node: str, conditions: Sequence[Condition], now: float) -> None:
        body = {"status": {"conditions": [node_condition(c, now) for c in conditions]}}
        self.core.patch_node_status(node, body, _content_type=STRATEGIC_MERGE)

    def expected_gpus(self, node: str) -> int | None:
        """The node's ``kiban.io/gpu-count`` label, if it has a whole number there."""
        labels = self.core.read_node(node).metadata.labels or {}
        value = str(labels.get(GPU_COUNT_LABEL, "")).strip()
        return int(value) if value.isdigit() else None
