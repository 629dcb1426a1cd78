"""Extended resources: countable things a node advertises besides GPUs, CPU and memory.

Kubernetes names them ``vendor/name`` (``nvidia.com/hostdev``, ``rdma/hca``,
``nvidia-dgx-h100/nic0``, ``nvidia.com/mig-1g.10gb``) or ``hugepages-<size>``; a job asks for
whole units of them, hugepages in bytes (``hugepages-2Mi: 1Gi``). kiban counts them per node,
places replicas only where enough are free, charges them to queue quotas that name them and
puts them in the pods' limits.
"""

from __future__ import annotations

import re
from typing import Any

from kiban.domain.quantity import parse_memory

_DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
VENDOR_RESOURCE = re.compile(rf"^{_DNS_SUBDOMAIN}/[A-Za-z0-9]([-A-Za-z0-9_.]{{0,61}}[A-Za-z0-9])?$")
HUGEPAGES = re.compile(r"^hugepages-[0-9]+[KMG]i$")
BUILT_IN = {"gpu": "gpu", "cpu": "cpu", "memory": "memory", "nvidia.com/gpu": "gpu"}
"""Names that are not extended resources, and the field that counts them instead."""
MAX_AMOUNT = 2**50


def is_extended_name(name: str) -> bool:
    """Whether ``name`` has the shape of an extended resource (not whether a node has it)."""
    return bool(VENDOR_RESOURCE.match(name) or HUGEPAGES.match(name)) and name not in BUILT_IN


def check_extended_name(name: str) -> str:
    """``name`` if it is an extended resource's name; ValueError saying why otherwise."""
    if name in BUILT_IN:
        raise ValueError(f"{name} is counted by the {BUILT_IN[name]!r} field")
    if not is_extended_name(name):
        raise ValueError(
            f"{name!r} is not a resource name (examples: nvidia.com/hostdev, "
            "rdma/hca, hugepages-2Mi)"
        )
    return name


def parse_extended_amount(name: str, value: Any) -> int:
    """Units of ``name``: a whole number, or bytes (``1Gi``) for hugepages."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a whole number, not a boolean")
    if HUGEPAGES.match(name):
        amount = parse_memory(value)
    elif isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        amount = int(value)
    elif isinstance(value, str) and value.strip().isdigit():
        amount = int(value.strip())
    else:
        raise ValueError(f"{name} must be a whole number of units, not {value!r}")
    if amount < 0:
        raise ValueError(f"{name} must not be negative")
    if amount > MAX_AMOUNT:
        raise ValueError(f"{name} is more than any node holds")
    return amount


def parse_extended(values: Any, where: str = "resources") -> dict[str, int]:
    """``{name: units}`` from a mapping of extended resources; ValueError naming the bad one."""
    if not isinstance(values, dict):
        raise ValueError(f"{where} must be a mapping of resource names to amounts")
    out: dict[str, int] = {}
    for name, value in values.items():
        check_extended_name(str(name))
        out[str(name)] = parse_extended_amount(str(name), value)
    return out
