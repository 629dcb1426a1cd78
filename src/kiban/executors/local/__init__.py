"""The local executor: replicas as process groups on this machine, on real or virtual nodes."""

from kiban.executors.local.executor import LocalExecutor

__all__ = ["LocalExecutor"]
