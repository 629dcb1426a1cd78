"""Names and labels of the Kubernetes objects of a job: namespace, headless Service, pods.

Every object of a job carries the label ``kiban.dev/job`` (its key, below) and the full job id
in the annotation ``kiban.dev/job-id``, so that all of a job is found by one label selector.
Objects of one attempt also carry ``kiban.dev/attempt``.
"""

from __future__ import annotations

import hashlib

from kiban.domain.jobspec import DNS_LABEL

MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "kiban"
JOB_LABEL = "kiban.dev/job"
ATTEMPT_LABEL = "kiban.dev/attempt"
RANK_LABEL = "kiban.dev/rank"
TASK_LABEL = "kiban.dev/task"
TENANT_LABEL = "kiban.dev/tenant"
JOB_ID_ANNOTATION = "kiban.dev/job-id"
SERVICE_LABEL = "kiban.dev/service"  # on a service replica's pods (from its job's labels)
REVISION_LABEL = "kiban.dev/revision"
MANAGED_SELECTOR = f"{MANAGED_BY}={MANAGER}"
MAX_KEY = 40  # leaves room for "kb-", "-<attempt>" and "-<rank>" within a 63-character label


def job_key(job_id: str) -> str:
    """A label-safe key of the job id: the id itself when short, else a hashed abbreviation.

    Label values and Service names are at most 63 characters; job ids may be 64.
    """
    if len(job_id) <= MAX_KEY:
        return job_id
    digest = hashlib.sha256(job_id.encode()).hexdigest()[:8]
    return f"{job_id[: MAX_KEY - 9].rstrip('-')}-{digest}"


def namespace_for(prefix: str, tenant: str) -> str:
    """The tenant's namespace: ``prefix`` + tenant, refused if not a valid DNS label."""
    name = f"{prefix}{tenant}"
    if not DNS_LABEL.match(name):
        raise ValueError(
            f"namespace {name!r} (prefix {prefix!r} + tenant {tenant!r}) is not a valid "
            "DNS label: lowercase letters, digits and '-', at most 63 characters"
        )
    return name


def service_name(job_id: str, attempt: int) -> str:
    """The headless Service of one attempt (a DNS-1035 label: starts with a letter)."""
    return f"kb-{job_key(job_id)}-{attempt}"


def revision_service_name(revision: str) -> str:
    """The Service of one revision of an inference service (``kbs-<revision>``, hashed when
    too long for a DNS-1035 label)."""
    name = f"kbs-{revision}"
    if len(name) <= 63:
        return name
    digest = hashlib.sha256(revision.encode()).hexdigest()[:8]
    return f"kbs-{revision[:50].rstrip('-')}-{digest}"


def pod_name(job_id: str, attempt: int, rank: int) -> str:
    """The pod of one replica, also its hostname under the attempt's Service."""
    return f"{service_name(job_id, attempt)}-{rank}"


def master_addr(job_id: str, attempt: int, namespace: str, cluster_domain: str) -> str:
    """The stable DNS name of replica 0: ``<pod>.<service>.<namespace>.svc.<domain>``."""
    service = service_name(job_id, attempt)
    return f"{pod_name(job_id, attempt, 0)}.{service}.{namespace}.svc.{cluster_domain}"


def job_labels(job_id: str, tenant: str, attempt: int) -> dict[str, str]:
    """Labels of every object of one attempt of a job."""
    return {
        MANAGED_BY: MANAGER,
        JOB_LABEL: job_key(job_id),
        ATTEMPT_LABEL: str(attempt),
        TENANT_LABEL: tenant,
    }


def attempt_selector(job_id: str, attempt: int) -> str:
    """The label selector of one attempt's objects."""
    return f"{MANAGED_SELECTOR},{JOB_LABEL}={job_key(job_id)},{ATTEMPT_LABEL}={attempt}"


def make_handle(namespace: str, name: str, uid: str) -> str:
    """The replica handle kept in the store: ``namespace/name/uid``."""
    return f"{namespace}/{name}/{uid}"


def parse_handle(handle: str) -> tuple[str, str, str]:
    """``(namespace, name, uid)`` of a handle; ValueError for anything else."""
    parts = handle.split("/")
    if len(parts) != 3 or not all(parts):
        raise ValueError(f"not a pod handle: {handle!r}")
    return parts[0], parts[1], parts[2]
