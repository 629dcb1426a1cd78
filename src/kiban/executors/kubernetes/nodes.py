"""Nodes as kiban sees them, from the Node objects and pods of the API (pure functions).

A node is unhealthy (its jobs return to their queues) when it is not Ready, when a condition
named in ``unhealthy_conditions`` is True, or when it has a NoExecute taint kiban's pods do not
tolerate. It takes no new work, though healthy, when cordoned (``spec.unschedulable``) or
tainted NoSchedule with a key kiban does not tolerate. GPUs requested by pods kiban did not
create are reported as ``gpus_used_elsewhere``. Extended resources (``nvidia.com/hostdev``,
``rdma/hca``, ``hugepages-2Mi``, MIG slices) are read from ``status.allocatable`` too: every
countable name of that shape with a non-zero amount.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from kiban.domain.extended_resources import is_extended_name, parse_extended_amount
from kiban.domain.quantity import parse_cpu_millis, parse_memory
from kiban.executors.base import NodeInfo
from kiban.executors.kubernetes.naming import MANAGED_BY, MANAGER
from kiban.executors.kubernetes.options import GPU_RESOURCE, KubernetesOptions

log = logging.getLogger("kiban.executors.kubernetes")

TERMINAL_PHASES = ("Succeeded", "Failed")


def _quantity(node: str, what: str, value: Any, parse: Any) -> int:
    if value is None:
        return 0
    try:
        return int(parse(str(value)))
    except ValueError:
        log.warning("node %s: cannot read allocatable %s %r; counted as 0", node, what, value)
        return 0


def node_info(
    node: Mapping[str, Any], options: KubernetesOptions, gpus_used_elsewhere: int = 0
) -> NodeInfo:
    """The NodeInfo of one Node object (as JSON), with its health and schedulability."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    name = str(meta.get("name", ""))
    allocatable = status.get("allocatable") or {}
    problems = health_problems(node, options)
    return NodeInfo(
        name=name,
        gpus=_quantity(name, GPU_RESOURCE, allocatable.get(GPU_RESOURCE), int),
        cpu_millis=_quantity(name, "cpu", allocatable.get("cpu"), parse_cpu_millis),
        memory=_quantity(name, "memory", allocatable.get("memory"), parse_memory),
        labels=dict(meta.get("labels") or {}),
        healthy=not problems,
        health_message="; ".join(problems),
        gpus_used_elsewhere=gpus_used_elsewhere,
        unschedulable="" if problems else unschedulable_reason(spec, options),
        extended=extended_allocatable(name, allocatable),
    )


def extended_allocatable(node: str, allocatable: Mapping[str, Any]) -> dict[str, int]:
    """The extended resources of a node's allocatable (zero amounts left out: a device plugin
    that found no device, or hugepages of a size not reserved)."""
    found: dict[str, int] = {}
    for name, value in allocatable.items():
        if not is_extended_name(str(name)):
            continue
        try:
            amount = parse_extended_amount(str(name), value)
        except ValueError:
            log.warning("node %s: cannot read allocatable %s %r; left out", node, name, value)
            continue
        if amount:
            found[str(name)] = amount
    return found


def health_problems(node: Mapping[str, Any], options: KubernetesOptions) -> list[str]:
    """Why the node cannot keep running work: not Ready, a bad condition, a NoExecute taint."""
    problems = []
    conditions = (node.get("status") or {}).get("conditions") or []
    by_type = {c.get("type"): c for c in conditions}
    ready = by_type.get("Ready")
    if ready is None or ready.get("status") != "True":
        detail = (ready or {}).get("message") or (ready or {}).get("reason") or "no Ready condition"
        problems.append(f"not Ready ({detail})")
    for kind in options.unhealthy_conditions:
        condition = by_type.get(kind)
        if condition is not None and condition.get("status") == "True":
            detail = condition.get("message") or condition.get("reason") or ""
            problems.append(f"{kind}=True" + (f" ({detail})" if detail else ""))
    for taint in _untolerated(node.get("spec") or {}, options):
        if taint.get("effect") == "NoExecute":
            problems.append(f"taint {_taint(taint)}")
    return problems


def unschedulable_reason(spec: Mapping[str, Any], options: KubernetesOptions) -> str:
    """Why a healthy node takes no new work (cordoned, NoSchedule taint); "" if it does."""
    if spec.get("unschedulable"):
        return "cordoned in Kubernetes (spec.unschedulable)"
    for taint in _untolerated(spec, options):
        if taint.get("effect") == "NoSchedule":
            return f"taint {_taint(taint)} is not tolerated"
    return ""


def _untolerated(spec: Mapping[str, Any], options: KubernetesOptions) -> list[Mapping[str, Any]]:
    taints = spec.get("taints") or []
    return [t for t in taints if t.get("key") not in options.tolerated_taints]


def _taint(taint: Mapping[str, Any]) -> str:
    value = taint.get("value")
    key = f"{taint.get('key')}={value}" if value else str(taint.get("key"))
    return f"{key}:{taint.get('effect')}"


def gpus_of_pod(pod: Mapping[str, Any]) -> int:
    """GPUs a pod holds: its containers' (limits, else requests) or its largest init container."""
    spec = pod.get("spec") or {}

    def of(container: Mapping[str, Any]) -> int:
        resources = container.get("resources") or {}
        value = (resources.get("limits") or {}).get(GPU_RESOURCE)
        if value is None:
            value = (resources.get("requests") or {}).get(GPU_RESOURCE)
        try:
            return int(str(value)) if value is not None else 0
        except ValueError:
            return 0

    main = sum(of(c) for c in spec.get("containers") or [])
    init = max((of(c) for c in spec.get("initContainers") or []), default=0)
    return max(main, init)


def foreign_gpus(pods: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """GPUs per node held by live pods that kiban did not create."""
    used: dict[str, int] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        if (meta.get("labels") or {}).get(MANAGED_BY) == MANAGER:
            continue
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        if not node or phase in TERMINAL_PHASES:
            continue
        gpus = gpus_of_pod(pod)
        if gpus:
            used[node] = used.get(node, 0) + gpus
    return used
