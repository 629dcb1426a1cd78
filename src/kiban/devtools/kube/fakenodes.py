"""Fake GPU nodes for KWOK: the Node objects ``kiban dev kube up`` creates.

Each node carries KWOK's annotation (``kwok.x-k8s.io/node: fake``, so our KWOK manages it),
``nvidia.com/gpu`` in capacity and allocatable next to cpu, memory and pods, the GPU product
label NVIDIA's GPU feature discovery sets, ``kubernetes.io/hostname`` and the user's labels.

Topology ``IxBxL`` (e.g. ``2x4x4``) means I HPC islands, each of B network blocks, each of L
local blocks: I*B*L local blocks in all. The nodes fill them in order, as evenly as possible
(sizes differ by at most one), and carry the labels OCI uses for RDMA network locality:
``oci.oraclecloud.com/rdma.hpc_island_id``, ``...rdma.network_block_id`` and
``...rdma.local_block_id``. The values name the whole path (``block-1-3`` is network block 3 of
island 1), so a block's id is unique across islands.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_ANNOTATION_VALUE = "fake"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
HOSTNAME_LABEL = "kubernetes.io/hostname"
ISLAND_LABEL = "oci.oraclecloud.com/rdma.hpc_island_id"
NETWORK_BLOCK_LABEL = "oci.oraclecloud.com/rdma.network_block_id"
LOCAL_BLOCK_LABEL = "oci.oraclecloud.com/rdma.local_block_id"
TOPOLOGY_LABELS = (ISLAND_LABEL, NETWORK_BLOCK_LABEL, LOCAL_BLOCK_LABEL, HOSTNAME_LABEL)

_NAME_PART = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")


class NodeSpecError(ValueError):
    """A fake node option is invalid; the message names the option."""


@dataclass(frozen=True)
class Topology:
    """Islands x network blocks per island x local blocks per network block."""

    islands: int
    blocks: int
    local_blocks: int

    @property
    def local_block_count(self) -> int:
        return self.islands * self.blocks * self.local_blocks

    def labels_for(self, index: int, count: int) -> dict[str, str]:
        """Topology labels of node number index (0-based) of count nodes."""
        local = index * self.local_block_count // max(count, 1)
        island, rest = divmod(local, self.blocks * self.local_blocks)
        block, local_block = divmod(rest, self.local_blocks)
        return {
            ISLAND_LABEL: f"island-{island}",
            NETWORK_BLOCK_LABEL: f"block-{island}-{block}",
            LOCAL_BLOCK_LABEL: f"local-{island}-{block}-{local_block}",
        }


def parse_topology(text: str) -> Topology:
    """Parse ``IxBxL`` (three positive integers), e.g. ``2x4x4``."""
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise NodeSpecError(
            f"--topology must be ISLANDSxBLOCKSxLOCAL_BLOCKS with positive integers "
            f"(e.g. 2x4x4), not {text!r}"
        )
    return Topology(*(int(p) for p in parts))


def check_label(key: str, value: str, option: str = "--label") -> None:
    """Raise :class:`NodeSpecError` unless key=value is a valid Kubernetes label."""
    prefix, slash, name = key.rpartition("/")
    if slash and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        raise NodeSpecError(f"{option}: {key!r} has an invalid prefix (a DNS subdomain)")
    if not _NAME_PART.match(name):
        raise NodeSpecError(
            f"{option}: {key!r} is not a valid label key (at most 63 letters, digits, "
            "'-', '_' or '.', starting and ending with a letter or digit, optional prefix/)"
        )
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        raise NodeSpecError(
            f"{option}: value {value!r} of {key} is not a valid label value (at most 63 "
            "letters, digits, '-', '_' or '.', starting and ending with a letter or digit)"
        )


def parse_labels(items: list[str], option: str = "--label") -> dict[str, str]:
    """Parse KEY=VALUE items into labels, checking each."""
    labels: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise NodeSpecError(f"{option} must be KEY=VALUE, not {item!r}")
        check_label(key, value, option)
        labels[key] = value
    return labels


@dataclass(frozen=True)
class FakeNodeSpec:
    """What every fake node of one control plane looks like."""

    count: int = 4
    gpus: int = 8
    gpu_product: str = "H100"
    cpu: str = "112"
    memory: str = "2Ti"
    pods: int = 110
    labels: Mapping[str, str] = field(default_factory=dict)
    topology: Topology | None = None
    name_prefix: str = "kwok-node-"

    def __post_init__(self) -> None:
        if self.count < 0:
            raise NodeSpecError("--nodes must not be negative")
        if self.gpus < 0:
            raise NodeSpecError("--gpus-per-node must not be negative")
        if self.pods < 1:
            raise NodeSpecError("pods per node must be at least 1")
        for option, quantity in (("cpu", self.cpu), ("memory", self.memory)):
            if not _QUANTITY.match(quantity):
                raise NodeSpecError(f"{option} per node {quantity!r} is not a quantity")
        check_label(GPU_PRODUCT_LABEL, self.gpu_product, "--gpu-product")
        for key, value in self.labels.items():
            check_label(key, value)

    def name(self, index: int) -> str:
        width = max(4, len(str(max(self.count - 1, 0))))
        return f"{self.name_prefix}{index:0{width}d}"

    def node(self, index: int) -> dict[str, Any]:
        """The Node object (a plain dict, as the API takes it) of node number index."""
        name = self.name(index)
        resources = {
            "cpu": self.cpu,
            "memory": self.memory,
            "pods": str(self.pods),
            GPU_RESOURCE: str(self.gpus),
        }
        labels = {
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux",
            "type": "kwok",
            GPU_PRODUCT_LABEL: self.gpu_product,
            GPU_COUNT_LABEL: str(self.gpus),
        }
        if self.topology is not None:
            labels.update(self.topology.labels_for(index, self.count))
        labels.update(self.labels)
        labels[HOSTNAME_LABEL] = name
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {
                    KWOK_ANNOTATION: KWOK_ANNOTATION_VALUE,
                    "node.alpha.kubernetes.io/ttl": "0",
                },
                "labels": labels,
            },
            "spec": {},
            "status": {
                "capacity": dict(resources),
                "allocatable": dict(resources),
            },
        }

    def nodes(self) -> list[dict[str, Any]]:
        return [self.node(i) for i in range(self.count)]
