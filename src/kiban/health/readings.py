"""What a node agent reads from the GPUs of one node, in one pass: the input of every check.

Counters are as NVML gives them (cumulative since boot or driver load); the checks compare a
reading with the previous one to see a counter rise. A field NVML could not give (an older GPU,
a query not supported) is None, and the checks that need it say Unknown rather than guess.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Reading(BaseModel):
    """Base of the readings: frozen, and strict about unknown fields so fixtures stay honest."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class XidEvent(Reading):
    """One Xid error NVML reported for a GPU (``nvmlEventTypeXidCriticalError``)."""

    code: int
    at: float  # UNIX seconds, as the agent saw it


class GpuReading(Reading):
    """One GPU's health counters and telemetry (DCGM's field for each in the comment)."""

    index: int
    uuid: str = ""
    model: str = ""
    lost: bool = False  # NVML_ERROR_GPU_IS_LOST on any query: the GPU fell off the bus
    responding: bool = True  # False when a query timed out or failed unexpectedly
    error: str = ""  # what failed when lost or not responding
    # ECC (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, DCGM_FI_DEV_ECC_DBE_AGG_TOTAL, ..._SBE_...)
    ecc_volatile_uncorrectable: int | None = None
    ecc_aggregate_uncorrectable: int | None = None
    ecc_volatile_correctable: int | None = None
    ecc_aggregate_correctable: int | None = None
    # Row remapping (DCGM_FI_DEV_{UN,}CORRECTABLE_REMAPPED_ROWS, DCGM_FI_DEV_ROW_REMAP_FAILURE)
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    # PCIe (link generation and width now and at most; DCGM_FI_DEV_PCIE_REPLAY_COUNTER)
    pcie_link_gen: int | None = None
    pcie_link_gen_max: int | None = None
    pcie_link_width: int | None = None
    pcie_link_width_max: int | None = None
    pcie_replay_counter: int | None = None
    # NVSwitch fabric: None where the GPU has no fabric (NVML_GPU_FABRIC_STATE_NOT_SUPPORTED),
    # else "completed", "in_progress", "not_started"; fabric_status is NVML's result text.
    fabric_state: str | None = None
    fabric_status: str = ""
    # Xid events seen since the previous reading (the agent keeps an NVML event set open).
    xids: tuple[XidEvent, ...] = ()
    # NVLink: links that should be up and are down; the CRC error counters summed over links.
    nvlink_links_down: int | None = None
    nvlink_crc_errors: int | None = None
    # KiB sent and received over the links that are up, since the driver loaded (NVML's
    # NVLink data throughput fields); exported as DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL
    nvlink_bandwidth_total: int | None = None
    # Throttling (nvmlDeviceGetCurrentClocksEventReasons)
    thermal_throttle: bool | None = None
    power_throttle: bool | None = None
    # Telemetry (DCGM_FI_DEV_GPU_UTIL, FB_USED/FB_FREE in MiB, GPU_TEMP in C, POWER_USAGE in W)
    utilization_percent: float | None = None
    memory_used_mib: float | None = None
    memory_free_mib: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None


class NodeReading(Reading):
    """All GPUs of one node at one time, or why NVML could not be read at all."""

    node: str
    taken_at: float
    nvml_available: bool
    error: str = ""  # why NVML is unavailable ("NVML not found"), or why the pass failed
    driver_version: str = ""
    gpus: tuple[GpuReading, ...] = Field(default=())
