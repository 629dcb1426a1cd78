"""The cluster file given to ``kiban up --config``: the local executor's nodes and the queues."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from kiban.domain.jobspec import CpuMillis, MemoryBytes, SpecModel, check_dns_label


class NodeDecl(SpecModel):
    """A virtual node of the local executor."""

    name: str
    gpus: int = Field(default=0, ge=0, le=1024)
    cpus: CpuMillis = 8000
    memory: MemoryBytes = 32 * 2**30
    labels: dict[str, str] = Field(default_factory=dict)


class QueueDecl(SpecModel):
    """A queue, its tenant, its GPU quota (absent: no limit) and its ordering strategy."""

    name: str
    tenant: str = "default"
    quota: dict[str, int] = Field(default_factory=dict)
    strategy: Literal["StrictFIFO", "BestEffortFIFO"] = "StrictFIFO"

    @field_validator("name", "tenant")
    @classmethod
    def _names(cls, value: str) -> str:
        return check_dns_label(value, "name")

    @field_validator("quota")
    @classmethod
    def _quota(cls, value: dict[str, int]) -> dict[str, int]:
        for key, amount in value.items():
            if key != "gpu":
                raise ValueError(f"unknown resource {key!r} in quota; known: gpu")
            if amount < 0:
                raise ValueError("quota must not be negative")
        return value

    @property
    def gpu_quota(self) -> int | None:
        return self.quota.get("gpu")


class ClusterConfig(SpecModel):
    """Nodes (for the local executor) and queues; unknown keys are errors."""

    nodes: list[NodeDecl] = Field(default_factory=list)
    queues: list[QueueDecl] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> ClusterConfig:
        for what, names in (
            ("node", [n.name for n in self.nodes]),
            ("queue", [q.name for q in self.queues]),
        ):
            repeated = sorted({n for n in names if names.count(n) > 1})
            if repeated:
                raise ValueError(f"{what} names must be unique; repeated: {', '.join(repeated)}")
        return self


def parse_cluster_config(doc: dict[str, Any]) -> ClusterConfig:
    return ClusterConfig.model_validate(doc)
