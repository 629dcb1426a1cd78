"""Notebooks: a JupyterLab server run as an interactive job behind kiban's ``/nb/`` route.

A notebook is named per tenant; its spec says what it holds (GPUs, CPUs, queue) and when it
is stopped (``idleTimeout``, ``maxLifetime``). Its job runs JupyterLab from kiban's own
interpreter in the owner's persistent directory, kept across stop and start.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import sys
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import field_serializer, field_validator

from kiban.domain.declarations import Duration, GpuCount
from kiban.domain.jobspec import CpuMillis, JobManifest, SpecModel, check_dns_label

NOTEBOOK_LABEL = "kiban.dev/notebook"
DEFAULT_NAME = "notebook"
DEFAULT_IDLE_TIMEOUT_S = 3600.0
DEFAULT_MAX_LIFETIME_S = 24 * 3600.0
DEFAULT_READY_TIMEOUT_S = 120.0
"""How long a started notebook's server has to answer ``/api/status`` before it fails."""
ROUTE_PREFIX = "/nb"
RUNTIME_MODULE = "kiban.web.jupyter_runtime"
TASK_NAME = "jupyter"


class NotebookState(StrEnum):
    """Where a notebook stands (stored; the values never change)."""

    STARTING = "Starting"  # its job waits in its queue, or JupyterLab is not answering yet
    RUNNING = "Running"  # JupyterLab answers through the route
    STOPPED = "Stopped"  # stopped by its owner, culled, or at its maxLifetime: start it again
    FAILED = "Failed"  # its job failed, or the server did not come up in time

    @property
    def active(self) -> bool:
        return self in (NotebookState.STARTING, NotebookState.RUNNING)


class NotebookSpec(SpecModel):
    """What a notebook holds and when it stops; durations as ``30s``, ``1h``, ``7d``."""

    gpus: GpuCount = 0
    cpus: CpuMillis = 1000
    queue: str | None = None
    idle_timeout: Duration = DEFAULT_IDLE_TIMEOUT_S
    max_lifetime: Duration = DEFAULT_MAX_LIFETIME_S

    @field_serializer("cpus", when_used="json")
    def _cpus_out(self, value: int) -> str:
        """Millicores written as ``500m``: a stored spec reads back as the same spec."""
        return f"{value}m"

    @field_validator("idle_timeout", "max_lifetime")
    @classmethod
    def _positive(cls, value: float) -> float:
        if not 0 < value < math.inf:
            raise ValueError("must be a positive duration (examples: 30s, 1h, 7d)")
        return value


class NotebookRequest(NotebookSpec):
    """``POST /api/v1/notebooks``: the notebook's name and its spec."""

    name: str = DEFAULT_NAME

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_dns_label(value, "notebook name")

    def spec(self) -> NotebookSpec:
        return NotebookSpec.model_validate(
            self.model_dump(mode="json", exclude={"name"}, by_alias=True)
        )


def notebook_url(tenant: str, name: str) -> str:
    """The notebook's path on kiban's API address (JupyterLab's ``base_url``)."""
    return f"{ROUTE_PREFIX}/{tenant}/{name}/"


def notebook_dir(home: Path, tenant: str, owner: str, name: str) -> Path:
    """The owner's persistent directory of one notebook (JupyterLab's ``root_dir``)."""
    return home / "notebooks" / tenant / _safe(owner) / name


def _safe(part: str) -> str:
    """A token's name as one path component (names are free text: no separator, no ``..``)."""
    cleaned = "".join(c if c.isalnum() or c in "-_." else "_" for c in part).strip(".")
    return cleaned or "_"


LOOPBACK = "127.0.0.1"
ANY_ADDRESS = "0.0.0.0"  # a pod's own network, which only kiban's route reaches


@dataclass(frozen=True)
class NotebookRuntime:
    """Where and how a notebook's server runs, as the executor provides it: its directory as
    the server sees it, the address it listens on, the interpreter, and the volumes that hold
    the directory (in a job task's ``volumes`` form; none where it is a local path)."""

    root_dir: str
    listen: str = LOOPBACK
    python: str = sys.executable
    volumes: tuple[dict[str, Any], ...] = field(default_factory=tuple)


def jupyter_token(key: bytes, tenant: str, name: str, job_id: str) -> str:
    """The Jupyter server token of one run of a notebook: an HMAC of its identity under the
    store's key, so that the proxy derives it again and no user ever sees it."""
    message = f"{tenant}\x00{name}\x00{job_id}".encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def notebook_job_manifest(
    *,
    tenant: str,
    name: str,
    spec: NotebookSpec,
    runtime: NotebookRuntime,
    priority_class: str | None,
    job_name: str,
) -> dict[str, Any]:
    """The job manifest (a document, as a user would submit it) that runs the notebook: one
    ``jupyter`` replica with the spec's resources, at the notebook priority class, stopped at
    ``maxLifetime`` (its ``maxRuntime``).

    The command is an argument list; the port (``$MASTER_PORT``) and Jupyter's token
    (``$JUPYTER_TOKEN``, added at launch) reach the server by environment, never argv.
    """
    command = [
        runtime.python,
        "-m",
        RUNTIME_MODULE,
        "--no-browser",
        f"--ServerApp.base_url={notebook_url(tenant, name)}",
        f"--ServerApp.root_dir={runtime.root_dir}",
        f"--ServerApp.ip={runtime.listen}",
    ]
    task: dict[str, Any] = {
        "name": TASK_NAME,
        "replicas": 1,
        "command": command,
        "resources": {"gpu": spec.gpus, "cpu": f"{spec.cpus}m"},
    }
    if runtime.volumes:
        task["volumes"] = [dict(v) for v in runtime.volumes]
    job_spec: dict[str, Any] = {
        "tasks": [task],
        "workingDir": runtime.root_dir,
        "restartPolicy": "Never",
        "maxRuntime": f"{spec.max_lifetime:g}s",
    }
    if spec.queue is not None:
        job_spec["queue"] = spec.queue
    if priority_class is not None:
        job_spec["priorityClass"] = priority_class
    document = {
        "apiVersion": "kiban/v1",
        "kind": "Job",
        "metadata": {"name": job_name, "labels": {NOTEBOOK_LABEL: name}},
        "spec": job_spec,
    }
    JobManifest.model_validate(document)  # a bad name or spec fails here, not at submission
    return document


def job_name_of(name: str) -> str:
    """The job's name: ``nb-<name>`` (trimmed to a DNS label)."""
    return f"nb-{name}"[:63].rstrip("-")
