"""Job manifests for tests, and their submission through the HTTP API.

One builder for the ``kiban/v1`` Job documents that tests submit: a single task with the
common knobs as keywords, anything else of ``spec`` as extra keywords (they replace keys of
``spec``, ``tasks`` included).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

JOBS_PATH = "/api/v1/jobs"


def manifest(
    name: str = "train",
    *,
    replicas: int = 1,
    gpu: int = 1,
    command: Sequence[str] = ("python", "train.py"),
    queue: str | None = None,
    cpu: int | str | None = None,
    memory: int | str | None = None,
    env: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    task: Mapping[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A ``kiban/v1`` Job named ``name`` of one task (``replicas`` x ``gpu`` GPUs, and ``cpu``
    and ``memory`` when given, running ``command``), in ``queue`` when given. ``task`` adds or
    replaces keys of the task (its ``name``, say); ``spec`` keywords replace keys of the spec."""
    resources: dict[str, Any] = {"gpu": gpu}
    if cpu is not None:
        resources["cpu"] = cpu
    if memory is not None:
        resources["memory"] = memory
    one: dict[str, Any] = {"replicas": replicas, "resources": resources, "command": list(command)}
    if env:
        one["env"] = dict(env)
    if annotations is not None:
        one["annotations"] = dict(annotations)
    one.update(task or {})
    body: dict[str, Any] = {"tasks": [one]}
    if queue is not None:
        body["queue"] = queue
    body.update(spec)
    return {"apiVersion": "kiban/v1", "kind": "Job", "metadata": {"name": name}, "spec": body}


def submit(client: httpx.Client, document: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
    """POST the manifest to the jobs API (``client``: FastAPI's ``TestClient`` or any
    ``httpx.Client`` on a kiban server), assert it was accepted (201) and return the job as
    answered; ``kwargs`` go to ``post`` (headers, for instance)."""
    answer = client.post(JOBS_PATH, json=dict(document), **kwargs)
    assert answer.status_code == 201, f"submission refused ({answer.status_code}): {answer.text}"
    job: dict[str, Any] = answer.json()
    return job
