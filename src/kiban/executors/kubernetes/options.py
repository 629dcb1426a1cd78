"""Settings of the Kubernetes executor, with defaults that suit a cluster of NVIDIA GPU nodes."""

from __future__ import annotations

import re
from dataclasses import dataclass

from kiban.domain.jobspec import DNS_LABEL
from kiban.domain.quantity import parse_memory

GPU_RESOURCE = "nvidia.com/gpu"
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
"""A Kubernetes object name such as a StorageClass's (RFC 1123 subdomain)."""


@dataclass(frozen=True)
class KubernetesOptions:
    """How kiban uses a cluster.

    ``unhealthy_conditions``: node condition types (as node-problem-detector sets them) that
    make a node unhealthy when ``True``; its jobs return to their queues. ``tolerated_taints``:
    taint keys kiban's pods tolerate (any effect); a node with another NoSchedule taint takes no
    new work, and one with another NoExecute taint is unhealthy. ``node_selector``: a label
    selector of the nodes kiban may use (empty: all). ``notebook_storage``: the size of the
    volume claim that keeps each notebook's directory (``notebook_storage_class``: its class).
    """

    namespace_prefix: str = "kiban-"
    cluster_domain: str = "cluster.local"
    unhealthy_conditions: tuple[str, ...] = (
        "NetworkUnavailable",
        # kiban node-agent's failing GPU checks (GpuThermal is a warning only)
        "GpuCount",
        "GpuEcc",
        "GpuRowRemap",
        "GpuBus",
        "GpuPcie",
        "GpuFabricManager",
        "GpuXid",
        "GpuNvlink",
    )
    tolerated_taints: tuple[str, ...] = (GPU_RESOURCE,)
    node_selector: str = ""
    default_image: str | None = None
    checkpoint_root: str = "/kiban/checkpoints"
    node_sync_s: float = 2.0
    master_port: int = 29500
    python: str = "python"  # the interpreter in the image, for the torchrun launcher
    pod_api_url: str | None = None  # where pods reach kiban's API (None: they are not told)
    notebook_storage: str = "10Gi"  # the size of each notebook's volume claim
    notebook_storage_class: str | None = None  # its StorageClass (None: the cluster's default)

    def __post_init__(self) -> None:
        prefix = self.namespace_prefix
        if prefix and not DNS_LABEL.match(prefix.rstrip("-") or "x"):
            raise ValueError(f"namespace_prefix {prefix!r}: lowercase letters, digits and '-'")
        if not 0 < self.master_port < 65536:
            raise ValueError(f"master_port {self.master_port} is not a TCP port")
        url = self.pod_api_url
        if url is not None and not url.startswith(("http://", "https://")):
            raise ValueError(f"pod_api_url {url!r} must be an http:// or https:// URL")
        if self.node_sync_s <= 0:
            raise ValueError(f"node_sync_s must be positive, not {self.node_sync_s}")
        try:
            size = parse_memory(self.notebook_storage)
        except ValueError as exc:
            raise ValueError(f"notebook_storage {self.notebook_storage!r}: {exc}") from None
        if size <= 0:
            raise ValueError(f"notebook_storage {self.notebook_storage!r} must be above zero")
        storage_class = self.notebook_storage_class
        if storage_class is not None and not DNS_SUBDOMAIN.match(storage_class):
            raise ValueError(
                f"notebook_storage_class {storage_class!r} is not a StorageClass name "
                "(lowercase letters, digits, '-' and '.')"
            )
