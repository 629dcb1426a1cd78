"""Command lines of etcd, kube-apiserver and KWOK for the local control plane (no I/O here).

Everything listens on 127.0.0.1 only. Rate limits are off, as kwokctl's
``--disable-qps-limits`` turns them off, so a benchmark measures the machine rather than a
throttle: the API server runs without priority and fairness and without in-flight limits (0
means none once priority and fairness is off). KWOK's client has no rate limiter at all; it gets
more parallel workers than its defaults instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kiban.devtools.kube.binaries import KubeBinaries
from kiban.devtools.kube.certs import ControlPlaneCerts
from kiban.devtools.kube.fakenodes import KWOK_ANNOTATION, KWOK_ANNOTATION_VALUE

SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
POD_CIDR = "10.128.0.0/12"
FAKE_NODE_IP = "10.127.0.1"
"""The InternalIP every fake node reports (nothing listens there: it is a label, not a host)."""


@dataclass(frozen=True)
class Ports:
    """The loopback ports one control plane listens on."""

    etcd_client: int
    etcd_peer: int
    apiserver: int
    kwok: int


def etcd_args(binaries: KubeBinaries, data_dir: Path, ports: Ports) -> list[str]:
    """A single-member etcd that trades durability for speed (its data is throwaway)."""
    client = f"http://127.0.0.1:{ports.etcd_client}"
    peer = f"http://127.0.0.1:{ports.etcd_peer}"
    return [
        str(binaries.etcd),
        "--name=kiban-dev",
        f"--data-dir={data_dir}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=kiban-dev={peer}",
        "--initial-cluster-state=new",
        "--unsafe-no-fsync=true",
        "--quota-backend-bytes=8589934592",
        "--log-level=warn",
    ]


def apiserver_args(binaries: KubeBinaries, certs: ControlPlaneCerts, ports: Ports) -> list[str]:
    """kube-apiserver as envtest runs it (client certificates, RBAC), without rate limits.

    No controller manager runs here, so two admission plugins that count on it are off:
    ServiceAccount (nothing would create a namespace's ``default`` service account it insists
    on) and TaintNodesByCondition (nothing would lift the ``node.kubernetes.io/not-ready`` taint
    it puts on every new node once KWOK makes the node Ready).
    """
    return [
        str(binaries.kube_apiserver),
        f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={ports.apiserver}",
        f"--tls-cert-file={certs.serving_cert}",
        f"--tls-private-key-file={certs.serving_key}",
        f"--client-ca-file={certs.ca_cert}",
        f"--service-account-key-file={certs.service_account_pub}",
        f"--service-account-signing-key-file={certs.service_account_key}",
        f"--service-account-issuer=https://127.0.0.1:{ports.apiserver}",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        "--authorization-mode=RBAC",
        "--allow-privileged=true",
        "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
        "--enable-priority-and-fairness=false",
        "--max-requests-inflight=0",
        "--max-mutating-requests-inflight=0",
        "--profiling=false",
        "--v=1",
    ]


def kwok_configuration() -> dict[str, Any]:
    """KWOK's own settings: more parallel workers than its defaults (4 and 1)."""
    return {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokConfiguration",
        "options": {
            "podPlayStageParallelism": 32,
            "nodePlayStageParallelism": 16,
            "podsOnNodeSyncParallelism": 8,
            "enableDebuggingHandlers": False,
            "enableProfilingHandler": False,
        },
    }


def kwok_args(
    binaries: KubeBinaries, kubeconfig: Path, configs: list[Path], ports: Ports
) -> list[str]:
    """KWOK managing the nodes annotated ``kwok.x-k8s.io/node: fake``, with our stages."""
    return [
        str(binaries.kwok),
        f"--kubeconfig={kubeconfig}",
        *(f"--config={path}" for path in configs),
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}={KWOK_ANNOTATION_VALUE}",
        f"--server-address=127.0.0.1:{ports.kwok}",
        f"--node-ip={FAKE_NODE_IP}",
        f"--cidr={POD_CIDR}",
        "--v=WARN",  # not a line per patch: thousands of pods would spend CPU on logs
    ]


def scheduler_configuration(kubeconfig: Path) -> dict[str, Any]:
    """kube-scheduler's settings: no leader election, client rate limits raised as kwokctl's
    ``--disable-qps-limits`` raises them."""
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig), "qps": 5000, "burst": 10000},
        "leaderElection": {"leaderElect": False},
    }


def scheduler_args(binaries: KubeBinaries, config: Path, port: int) -> list[str]:
    """kube-scheduler of the same release, serving /healthz on a loopback port."""
    return [
        str(binaries.kube_scheduler),
        f"--config={config}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        "--v=1",
    ]
