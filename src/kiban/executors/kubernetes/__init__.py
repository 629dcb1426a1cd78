"""The Kubernetes executor: jobs as pods on a real cluster (see ``executor``)."""

from kiban.executors.kubernetes.api import connect
from kiban.executors.kubernetes.executor import KubernetesExecutor
from kiban.executors.kubernetes.options import KubernetesOptions

__all__ = ["KubernetesExecutor", "KubernetesOptions", "connect"]
