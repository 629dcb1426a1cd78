"""What a node agent sends the control plane after each pass, and what it gets back.

``POST /api/v1/nodes/{name}/health`` takes a ``NodeHealthReport``; the reply tells the agent
which job holds each GPU (so its own ``/metrics`` labels GPUs the way dcgm-exporter labels them
with pods) and the interval to use. An agent serving several nodes sends their reports of one
pass together (``POST /api/v1/nodes/health``, a ``NodeHealthBatch``): taken all or none, in one
transaction, each node's reply in the answer.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from kiban.health.conditions import Condition
from kiban.health.readings import NodeReading


class NodeHealthReport(BaseModel):
    """One pass of the agent on one node: its readings and the conditions they gave."""

    model_config = ConfigDict(extra="forbid")

    reading: NodeReading
    conditions: list[Condition] = Field(max_length=64)
    # Where the agent serves /metrics and /check (host:port); "" when it serves nothing.
    agent_address: str = Field(default="", max_length=255)
    interval_s: float = Field(gt=0, le=3600)


MAX_BATCH_REPORTS = 256
"""The most reports one ``NodeHealthBatch`` carries (an agent with more nodes sends several)."""


class NodeHealthBatch(BaseModel):
    """Several nodes' reports of one pass; each node at most once."""

    model_config = ConfigDict(extra="forbid")

    reports: list[NodeHealthReport] = Field(min_length=1, max_length=MAX_BATCH_REPORTS)


class GpuAllocation(BaseModel):
    """Which job holds one GPU of the node, for the agent's metric labels."""

    gpu: int
    job: str
    tenant: str
    queue: str


class NodeHealthReply(BaseModel):
    """The control plane's answer to a report."""

    allocations: list[GpuAllocation]
    interval_s: float


class NodeHealthBatchReply(BaseModel):
    """The control plane's answer to a batch: each node's reply, by node name."""

    replies: dict[str, NodeHealthReply]
