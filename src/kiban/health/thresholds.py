"""The limits the GPU checks apply, with their defaults; ``kiban node-agent --thresholds FILE``.

Every field is documented where it is declared; an unknown key or a value of the wrong type is
refused naming the field (``SpecError``), so a typo never silently leaves a default in place.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kiban.domain.errors import FieldProblem, SpecError, format_location

# NVIDIA's Xid catalogue ("XID Errors", docs.nvidia.com/deploy/xid-errors) lists these as
# needing a reset or a node drain: 48 double-bit ECC error, 63 ECC page retirement or row
# remapping recorded, 64 ECC page retirement or row remapping failure, 74 NVLink error,
# 79 GPU has fallen off the bus, 92 high single-bit ECC error rate, 94 contained ECC error,
# 95 uncontained ECC error.
DEFAULT_CRITICAL_XIDS = frozenset({48, 63, 64, 74, 79, 92, 94, 95})


class HealthThresholds(BaseModel):
    """What counts as a fault for each check. The defaults suit a data-centre GPU fleet."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    xid_critical_codes: frozenset[int] = Field(
        default=DEFAULT_CRITICAL_XIDS,
        description="Xid codes that fail GpuXid; the others are recorded in its message only.",
    )
    xid_hold_s: float = Field(
        default=3600.0,
        ge=0,
        description="GpuXid stays True this long after it turned True for a critical Xid, "
        "though no new one came (an Xid is an event, the GPU's trouble is not).",
    )
    ecc_volatile_uncorrectable_max: int = Field(
        default=0,
        ge=0,
        description="GpuEcc fails when a GPU's volatile (since driver load) uncorrectable "
        "ECC errors are more than this.",
    )
    ecc_aggregate_uncorrectable_rise: int = Field(
        default=0,
        ge=0,
        description="GpuEcc fails when a GPU's aggregate (lifetime) uncorrectable ECC count "
        "rises by more than this from one pass to the next.",
    )
    ecc_aggregate_uncorrectable_max: int | None = Field(
        default=None,
        ge=0,
        description="GpuEcc fails when the aggregate uncorrectable count is above this; "
        "None: only a rise counts (old errors whose rows were remapped are not a fault).",
    )
    pcie_replay_rise_per_pass: int = Field(
        default=100,
        ge=0,
        description="GpuPcie fails when the PCIe replay counter rises by more than this "
        "between two passes (a few replays are normal; a stream of them is a bad link).",
    )
    pcie_gen_check_min_utilization: float = Field(
        default=50.0,
        ge=0,
        le=101,
        description="A PCIe link generation below the maximum fails GpuPcie only while the "
        "GPU is at least this busy (percent): idle GPUs lower their link speed to save power. "
        "101 turns the generation check off. The link width is always checked.",
    )
    nvlink_crc_rise_per_pass: int = Field(
        default=0,
        ge=0,
        description="GpuNvlink fails when the NVLink CRC error count, summed over a GPU's "
        "links, rises by more than this between two passes.",
    )


def load_thresholds(path: Path) -> HealthThresholds:
    """Read thresholds from a YAML (or JSON) file; an empty file gives the defaults."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecError.single("", f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError.single("", f"{path} is not valid YAML: {exc}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SpecError.single("", f"{path} must be a mapping of threshold names to values")
    return parse_thresholds(data)


def parse_thresholds(data: dict[str, object]) -> HealthThresholds:
    """Validate a mapping into thresholds; each problem names its field."""
    try:
        return HealthThresholds.model_validate(data)
    except ValidationError as exc:
        raise SpecError(
            [FieldProblem(format_location(e["loc"]), e["msg"]) for e in exc.errors()]
        ) from None
