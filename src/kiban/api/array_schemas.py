"""What the API returns for job arrays (camelCase JSON)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kiban.api.schemas import ApiModel
from kiban.services.job_arrays import ArrayStatus
from kiban.store.models import JobArray


class ArrayDependencyOut(ApiModel):
    """A dependency of the array not resolved yet: the job (or array) and the end awaited."""

    job: str
    condition: str


class ArrayOut(ApiModel):
    """A job array: its indices (``<id>-<index>`` are its jobs), how many may run at once,
    its indices counted by state, the held ones by what holds them (``Dependency``,
    ``ArraySlot``), and with ``indices=true`` which indices are in each state (ranges).
    ``done``: every index has ended; ``succeeded``: every index succeeded."""

    kind: Literal["JobArray"] = "JobArray"
    id: str
    name: str
    tenant: str
    queue: str
    indices: str
    size: int
    parallelism: int | None
    submitted_at: float
    submitted_by: str | None = None
    counts: dict[str, int] = Field(default_factory=dict)
    held: dict[str, int] = Field(default_factory=dict)
    indices_by_state: dict[str, str] | None = None
    depends_on: list[ArrayDependencyOut] = Field(default_factory=list)
    done: bool = False
    succeeded: bool = False
    warnings: list[str] = Field(default_factory=list)


def array_out(array: JobArray, counts: dict[str, int] | None = None) -> ArrayOut:
    """The array as listed: its counts, when known."""
    counts = counts or {}
    done = bool(counts) and all(s in _ENDED for s, n in counts.items() if n)
    return ArrayOut(
        id=array.id,
        name=array.name,
        tenant=array.tenant,
        queue=array.queue,
        indices=array.indices,
        size=array.size,
        parallelism=array.parallelism,
        submitted_at=array.submitted_at,
        submitted_by=array.submitted_by,
        counts=counts,
        done=done,
        succeeded=done and counts.get("Succeeded", 0) == array.size,
    )


def status_out(status: ArrayStatus) -> ArrayOut:
    out = array_out(status.array, status.counts)
    out.held = status.held
    out.indices_by_state = status.by_state
    out.depends_on = [ArrayDependencyOut(**d) for d in status.waiting_for]
    return out


_ENDED = frozenset({"Succeeded", "Failed", "Cancelled"})
