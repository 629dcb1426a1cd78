"""Where kiban mounts a ``pvc://`` model's claim in a replica: one owner for the replica's
manifest, which mounts it (``kiban.domain.service_replica``), and the model server, which reads
it (``kiban.serving.runtime.storage``)."""

DEFAULT_PVC_ROOT = "/mnt/pvc"
"""Where kiban mounts a ``pvc://`` model's claim in a replica, as ``/mnt/pvc/<claim>``."""
PVC_ROOT_ENV = "KIBAN_PVC_ROOT"
"""The variable that moves that root (the local executor's replicas read claims from it)."""
