"""The health checks by name: the condition types a node agent reports and a remediation rule
of the cluster policy may name (the policy is validated against these, so they live here, below
``kiban.health``, which builds the checks themselves)."""

from __future__ import annotations

from enum import StrEnum


class CheckType(StrEnum):
    """The checks, named as the condition types they report (OKE's NPD GPU plugins' names)."""

    GPU_COUNT = "GpuCount"
    GPU_ECC = "GpuEcc"
    GPU_ROW_REMAP = "GpuRowRemap"
    GPU_BUS = "GpuBus"
    GPU_PCIE = "GpuPcie"
    GPU_FABRIC_MANAGER = "GpuFabricManager"
    GPU_XID = "GpuXid"
    GPU_NVLINK = "GpuNvlink"
    GPU_THERMAL = "GpuThermal"
    ALLREDUCE_DEGRADED = "AllreduceDegraded"
