"""A local Kubernetes control plane for development, tests and benchmarks.

etcd, kube-apiserver and KWOK (fake GPU nodes, simulated pod lifecycles) on loopback, from
binaries built once by scripts/ensure-kube.sh. ``kiban dev kube up`` and the ``kube`` test tier
both start it with :func:`start_control_plane`.
"""

from kiban.devtools.kube.binaries import KubeBinariesMissing, find_binaries, require_binaries
from kiban.devtools.kube.controlplane import (
    ControlPlane,
    ControlPlaneError,
    ControlPlaneOptions,
    running_processes,
    start_control_plane,
    stop_control_plane,
)
from kiban.devtools.kube.fakenodes import FakeNodeSpec, NodeSpecError, Topology, parse_topology

__all__ = [
    "ControlPlane",
    "ControlPlaneError",
    "ControlPlaneOptions",
    "FakeNodeSpec",
    "KubeBinariesMissing",
    "NodeSpecError",
    "Topology",
    "find_binaries",
    "parse_topology",
    "require_binaries",
    "running_processes",
    "start_control_plane",
    "stop_control_plane",
]
