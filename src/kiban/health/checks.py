"""The GPU checks: pure functions from one node's reading (and the one before) to conditions.

Each check judges every GPU of the reading and combines the findings: True when a GPU has the
problem (the message names each such GPU and the reading), else Unknown when a GPU could not be
judged (NVML absent, a field it did not give, a GPU that does not answer), else False. A check
never guesses: a missing field is Unknown, not healthy. Counters that must not rise (PCIe
replays, NVLink CRC errors, aggregate ECC) are compared with the previous reading of the same GPU
(by UUID, else index); the first reading, or a counter that went down (a driver reload), is a
new baseline and is not a rise.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from kiban.health.conditions import CheckType, Condition, ConditionStatus
from kiban.health.readings import GpuReading, NodeReading
from kiban.health.thresholds import HealthThresholds


class HealthReason(StrEnum):
    """Why a check gave its status (the ``reason`` of a condition), CamelCase as NPD's are."""

    NVML_UNAVAILABLE = "NvmlUnavailable"
    CHECK_TIMED_OUT = "CheckTimedOut"
    CHECK_FAILED = "CheckFailed"
    NOT_REPORTED = "NotReported"  # the GPU did not give the field this check needs
    GPU_UNREADABLE = "GpuUnreadable"  # the GPU is lost or does not answer: GpuBus says which
    NO_GPUS = "NoGpus"
    GPU_COUNT_AS_EXPECTED = "GpuCountAsExpected"
    GPU_MISSING = "GpuMissing"
    GPU_COUNT_ABOVE_EXPECTED = "GpuCountAboveExpected"
    EXPECTED_COUNT_UNKNOWN = "ExpectedGpuCountUnknown"
    NO_UNCORRECTABLE_ECC = "NoUncorrectableEccErrors"
    ECC_VOLATILE_UNCORRECTABLE = "EccVolatileUncorrectable"
    ECC_AGGREGATE_UNCORRECTABLE = "EccAggregateUncorrectable"
    ECC_AGGREGATE_RISING = "EccAggregateUncorrectableRising"
    ROW_REMAP_OK = "RowRemapOk"
    ROW_REMAP_PENDING = "RowRemapPending"
    ROW_REMAP_FAILED = "RowRemapFailed"
    GPUS_ANSWER = "GpusAnswer"
    GPU_FELL_OFF_BUS = "GpuFellOffBus"
    GPU_NOT_RESPONDING = "GpuNotResponding"
    PCIE_LINK_OK = "PcieLinkOk"
    PCIE_WIDTH_DEGRADED = "PcieLinkWidthDegraded"
    PCIE_GEN_DEGRADED = "PcieLinkGenDegraded"
    PCIE_REPLAY_RISING = "PcieReplayRising"
    FABRIC_COMPLETED = "FabricCompleted"
    NO_NVSWITCH_FABRIC = "NoNvswitchFabric"
    FABRIC_NOT_COMPLETED = "FabricNotCompleted"
    NO_XID = "NoXid"
    XID_NON_CRITICAL = "XidNonCritical"
    XID_CRITICAL = "XidCritical"
    XID_CRITICAL_RECENT = "XidCriticalRecent"
    NVLINK_OK = "NvlinkOk"
    NVLINK_DOWN = "NvlinkDown"
    NVLINK_CRC_RISING = "NvlinkCrcRising"
    NOT_THROTTLED = "NotThrottled"
    THERMAL_THROTTLE = "ThermalThrottle"
    POWER_THROTTLE = "PowerThrottle"


@dataclass(frozen=True)
class Verdict:
    """A check's answer before it becomes a condition (which adds the type and the time)."""

    status: ConditionStatus
    reason: HealthReason
    message: str


@dataclass(frozen=True)
class Finding:
    """One GPU's part of a verdict; a False finding with text is recorded in the message."""

    status: ConditionStatus
    reason: HealthReason | None  # None: nothing to say (the check's own "fine" reason is used)
    text: str = ""


TRUE, FALSE, UNKNOWN = ConditionStatus.TRUE, ConditionStatus.FALSE, ConditionStatus.UNKNOWN
OK = Finding(FALSE, None)


def gpu_name(gpu: GpuReading) -> str:
    """``GPU 3 (GPU-abc...)``, as messages name a GPU."""
    return f"GPU {gpu.index} ({gpu.uuid})" if gpu.uuid else f"GPU {gpu.index}"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def previous_gpu(gpu: GpuReading, previous: NodeReading | None) -> GpuReading | None:
    """The same GPU in the previous reading: by UUID where it has one, else by index."""
    if previous is None:
        return None
    for old in previous.gpus:
        if (gpu.uuid and old.uuid == gpu.uuid) or (not gpu.uuid and old.index == gpu.index):
            return old
    return None


def rise(now: int | None, before: int | None) -> int:
    """How much a counter rose since the previous reading; 0 without one or after a reset."""
    if now is None or before is None or now < before:
        return 0
    return now - before


Judge = Callable[[GpuReading, GpuReading | None, HealthThresholds], Finding]


def per_gpu(
    reading: NodeReading,
    previous: NodeReading | None,
    thresholds: HealthThresholds,
    judge: Judge,
    ok_reason: HealthReason,
    ok_text: str,
    *,
    judge_unreadable: bool = False,
) -> Verdict:
    """Judge every GPU and combine: any True wins, then any Unknown, else False."""
    if not reading.nvml_available:
        return Verdict(UNKNOWN, HealthReason.NVML_UNAVAILABLE, reading.error or "NVML unavailable")
    if not reading.gpus:
        return Verdict(FALSE, HealthReason.NO_GPUS, "NVML sees no GPU on this node")
    findings = []
    for gpu in reading.gpus:
        if not judge_unreadable and (gpu.lost or not gpu.responding):
            what = "lost" if gpu.lost else "not responding"
            findings.append(
                Finding(UNKNOWN, HealthReason.GPU_UNREADABLE, f"{gpu_name(gpu)} {what}")
            )
        else:
            findings.append(judge(gpu, previous_gpu(gpu, previous), thresholds))
    for status in (TRUE, UNKNOWN, FALSE):  # the first GPU with something to say names it
        chosen = [f for f in findings if f.status is status and f.reason is not None]
        if chosen and (status is not FALSE or any(f.text for f in chosen)):
            text = "; ".join(f.text for f in chosen if f.text)
            return Verdict(status, chosen[0].reason or ok_reason, text)
    return Verdict(FALSE, ok_reason, f"{_plural(len(reading.gpus), 'GPU')}: {ok_text}")


@dataclass(frozen=True, slots=True)
class PerGpuCheck:
    """A check made GPU by GPU (``per_gpu``): ``judge`` says what one GPU's reading shows,
    ``ok_reason`` and ``ok_text`` what the node gets when every GPU passes."""

    judge: Judge
    ok_reason: HealthReason
    ok_text: str
    judge_unreadable: bool = False  # the judge reads lost or silent GPUs itself (GpuBus)

    def __call__(
        self,
        reading: NodeReading,
        previous: NodeReading | None,
        thresholds: HealthThresholds,
        expected_gpus: int | None,
    ) -> Verdict:
        return per_gpu(
            reading,
            previous,
            thresholds,
            self.judge,
            self.ok_reason,
            self.ok_text,
            judge_unreadable=self.judge_unreadable,
        )


def _not_reported(gpu: GpuReading, what: str) -> Finding:
    return Finding(UNKNOWN, HealthReason.NOT_REPORTED, f"{gpu_name(gpu)}: {what} not reported")


def check_gpu_count(
    reading: NodeReading,
    previous: NodeReading | None,
    thresholds: HealthThresholds,
    expected_gpus: int | None,
) -> Verdict:
    """GpuCount: the GPUs NVML sees against the node's expected count; fewer is a fault."""
    if not reading.nvml_available:
        return Verdict(UNKNOWN, HealthReason.NVML_UNAVAILABLE, reading.error or "NVML unavailable")
    seen = len(reading.gpus)
    if expected_gpus is None:
        return Verdict(
            UNKNOWN,
            HealthReason.EXPECTED_COUNT_UNKNOWN,
            f"NVML sees {_plural(seen, 'GPU')}; the expected count is not known yet",
        )
    text = f"NVML sees {_plural(seen, 'GPU')}, {expected_gpus} expected"
    if seen < expected_gpus:
        return Verdict(TRUE, HealthReason.GPU_MISSING, text)
    if seen > expected_gpus:
        return Verdict(FALSE, HealthReason.GPU_COUNT_ABOVE_EXPECTED, text)
    return Verdict(FALSE, HealthReason.GPU_COUNT_AS_EXPECTED, text)


def _judge_ecc(gpu: GpuReading, old: GpuReading | None, limits: HealthThresholds) -> Finding:
    volatile, aggregate = gpu.ecc_volatile_uncorrectable, gpu.ecc_aggregate_uncorrectable
    if volatile is not None and volatile > limits.ecc_volatile_uncorrectable_max:
        text = f"{gpu_name(gpu)}: {_plural(volatile, 'volatile uncorrectable ECC error')}"
        return Finding(TRUE, HealthReason.ECC_VOLATILE_UNCORRECTABLE, text)
    rose = rise(aggregate, old.ecc_aggregate_uncorrectable if old else None)
    if rose > limits.ecc_aggregate_uncorrectable_rise:
        text = f"{gpu_name(gpu)}: aggregate uncorrectable ECC errors rose by {rose} to {aggregate}"
        return Finding(TRUE, HealthReason.ECC_AGGREGATE_RISING, text)
    ceiling = limits.ecc_aggregate_uncorrectable_max
    if aggregate is not None and ceiling is not None and aggregate > ceiling:
        text = f"{gpu_name(gpu)}: {_plural(aggregate, 'aggregate uncorrectable ECC error')}"
        return Finding(TRUE, HealthReason.ECC_AGGREGATE_UNCORRECTABLE, text)
    if volatile is None or aggregate is None:
        return _not_reported(gpu, "uncorrectable ECC count")
    return OK


check_ecc = PerGpuCheck(
    _judge_ecc, HealthReason.NO_UNCORRECTABLE_ECC, "no uncorrectable ECC errors"
)
"""GpuEcc: volatile uncorrectable ECC errors, and the aggregate count rising."""


def _judge_row_remap(gpu: GpuReading, old: GpuReading | None, _: HealthThresholds) -> Finding:
    if gpu.remap_failure:
        return Finding(TRUE, HealthReason.ROW_REMAP_FAILED, f"{gpu_name(gpu)}: row remap failed")
    if gpu.remap_pending:
        text = f"{gpu_name(gpu)}: a row remap is pending (the GPU needs a reset)"
        return Finding(TRUE, HealthReason.ROW_REMAP_PENDING, text)
    if gpu.remap_failure is None or gpu.remap_pending is None:
        return _not_reported(gpu, "row remapping state")
    return OK


check_row_remap = PerGpuCheck(
    _judge_row_remap, HealthReason.ROW_REMAP_OK, "no pending or failed row remaps"
)
"""GpuRowRemap: a pending row remap (needs a GPU reset) or a remap that failed."""


def _judge_bus(gpu: GpuReading, old: GpuReading | None, _: HealthThresholds) -> Finding:
    detail = f": {gpu.error}" if gpu.error else ""
    if gpu.lost:
        text = f"{gpu_name(gpu)} fell off the bus{detail}"
        return Finding(TRUE, HealthReason.GPU_FELL_OFF_BUS, text)
    if not gpu.responding:
        text = f"{gpu_name(gpu)} does not answer{detail}"
        return Finding(TRUE, HealthReason.GPU_NOT_RESPONDING, text)
    return OK


check_bus = PerGpuCheck(_judge_bus, HealthReason.GPUS_ANSWER, "all answer", judge_unreadable=True)
"""GpuBus: a GPU that fell off the bus (NVML's GPU-lost) or does not answer."""


def _judge_pcie(gpu: GpuReading, old: GpuReading | None, limits: HealthThresholds) -> Finding:
    width, width_max = gpu.pcie_link_width, gpu.pcie_link_width_max
    if width is not None and width_max is not None and width < width_max:
        text = f"{gpu_name(gpu)}: PCIe link x{width}, x{width_max} at most"
        return Finding(TRUE, HealthReason.PCIE_WIDTH_DEGRADED, text)
    gen, gen_max, busy = gpu.pcie_link_gen, gpu.pcie_link_gen_max, gpu.utilization_percent
    if (
        gen is not None
        and gen_max is not None
        and gen < gen_max
        and busy is not None
        and busy >= limits.pcie_gen_check_min_utilization
    ):
        text = f"{gpu_name(gpu)}: PCIe gen {gen} at {busy:g}% busy, gen {gen_max} at most"
        return Finding(TRUE, HealthReason.PCIE_GEN_DEGRADED, text)
    rose = rise(gpu.pcie_replay_counter, old.pcie_replay_counter if old else None)
    if rose > limits.pcie_replay_rise_per_pass:
        text = (
            f"{gpu_name(gpu)}: PCIe replay counter rose by {rose} to {gpu.pcie_replay_counter} "
            f"(at most {limits.pcie_replay_rise_per_pass} a pass)"
        )
        return Finding(TRUE, HealthReason.PCIE_REPLAY_RISING, text)
    if width is None or width_max is None:
        return _not_reported(gpu, "PCIe link width")
    if gpu.pcie_replay_counter is None:
        return _not_reported(gpu, "PCIe replay counter")
    return OK


check_pcie = PerGpuCheck(
    _judge_pcie, HealthReason.PCIE_LINK_OK, "PCIe links at full width, replays steady"
)
"""GpuPcie: link width (and, while busy, generation) below the maximum; replays rising."""


def _judge_fabric(gpu: GpuReading, old: GpuReading | None, _: HealthThresholds) -> Finding:
    if gpu.fabric_state is None:
        if gpu.fabric_status:  # the query failed: cannot tell whether there is a fabric
            return _not_reported(gpu, f"fabric state ({gpu.fabric_status})")
        return OK
    if gpu.fabric_state != "completed":
        status = f", {gpu.fabric_status}" if gpu.fabric_status else ""
        text = f"{gpu_name(gpu)}: NVSwitch fabric {gpu.fabric_state}{status}"
        return Finding(TRUE, HealthReason.FABRIC_NOT_COMPLETED, text)
    return Finding(FALSE, HealthReason.FABRIC_COMPLETED)


def check_fabric_manager(
    reading: NodeReading,
    previous: NodeReading | None,
    thresholds: HealthThresholds,
    expected_gpus: int | None,
) -> Verdict:
    """GpuFabricManager: on NVSwitch systems, a GPU whose fabric state is not completed."""
    verdict = per_gpu(
        reading,
        previous,
        thresholds,
        _judge_fabric,
        HealthReason.FABRIC_COMPLETED,
        "NVSwitch fabric completed",
    )
    no_fabric = all(g.fabric_state is None and not g.fabric_status for g in reading.gpus)
    if verdict.status is FALSE and reading.gpus and no_fabric:
        return Verdict(FALSE, HealthReason.NO_NVSWITCH_FABRIC, "no NVSwitch fabric on this node")
    return verdict


def _judge_xid(gpu: GpuReading, old: GpuReading | None, limits: HealthThresholds) -> Finding:
    if not gpu.xids:
        return OK
    codes = ", ".join(str(x.code) for x in gpu.xids)
    critical = [x.code for x in gpu.xids if x.code in limits.xid_critical_codes]
    if critical:
        text = f"{gpu_name(gpu)}: critical Xid {', '.join(map(str, critical))} (all: {codes})"
        return Finding(TRUE, HealthReason.XID_CRITICAL, text)
    return Finding(FALSE, HealthReason.XID_NON_CRITICAL, f"{gpu_name(gpu)}: Xid {codes}")


check_xid = PerGpuCheck(_judge_xid, HealthReason.NO_XID, "no Xid events")
"""GpuXid: Xid events since the previous pass; a critical code fails, the rest are noted."""


def _judge_nvlink(gpu: GpuReading, old: GpuReading | None, limits: HealthThresholds) -> Finding:
    if gpu.nvlink_links_down:
        text = f"{gpu_name(gpu)}: {_plural(gpu.nvlink_links_down, 'NVLink link')} down"
        return Finding(TRUE, HealthReason.NVLINK_DOWN, text)
    rose = rise(gpu.nvlink_crc_errors, old.nvlink_crc_errors if old else None)
    if rose > limits.nvlink_crc_rise_per_pass:
        text = (
            f"{gpu_name(gpu)}: NVLink CRC errors rose by {rose} to {gpu.nvlink_crc_errors} "
            f"(at most {limits.nvlink_crc_rise_per_pass} a pass)"
        )
        return Finding(TRUE, HealthReason.NVLINK_CRC_RISING, text)
    if gpu.nvlink_links_down is None or gpu.nvlink_crc_errors is None:
        return _not_reported(gpu, "NVLink state")
    return OK


check_nvlink = PerGpuCheck(
    _judge_nvlink, HealthReason.NVLINK_OK, "NVLink links up, CRC errors steady"
)
"""GpuNvlink: NVLink links down, or their CRC error count rising."""


def _judge_thermal(gpu: GpuReading, old: GpuReading | None, _: HealthThresholds) -> Finding:
    temperature = f" at {gpu.temperature_c:g} C" if gpu.temperature_c is not None else ""
    if gpu.thermal_throttle:
        text = f"{gpu_name(gpu)}: thermal throttling{temperature}"
        return Finding(TRUE, HealthReason.THERMAL_THROTTLE, text)
    if gpu.power_throttle:
        power = f" at {gpu.power_w:g} W" if gpu.power_w is not None else ""
        return Finding(
            TRUE, HealthReason.POWER_THROTTLE, f"{gpu_name(gpu)}: power throttling{power}"
        )
    if gpu.thermal_throttle is None or gpu.power_throttle is None:
        return _not_reported(gpu, "throttle reasons")
    return OK


check_thermal = PerGpuCheck(_judge_thermal, HealthReason.NOT_THROTTLED, "not throttled")
"""GpuThermal: thermal or power throttling (a warning: True does not fail the node)."""


Check = Callable[[NodeReading, NodeReading | None, HealthThresholds, int | None], Verdict]

CHECKS: Mapping[CheckType, Check] = {
    CheckType.GPU_COUNT: check_gpu_count,
    CheckType.GPU_ECC: check_ecc,
    CheckType.GPU_ROW_REMAP: check_row_remap,
    CheckType.GPU_BUS: check_bus,
    CheckType.GPU_PCIE: check_pcie,
    CheckType.GPU_FABRIC_MANAGER: check_fabric_manager,
    CheckType.GPU_XID: check_xid,
    CheckType.GPU_NVLINK: check_nvlink,
    CheckType.GPU_THERMAL: check_thermal,
}
"""The node agent's checks, in the order they are reported (AllreduceDegraded is an active
check, run as a job: not here)."""


def hold_xid(
    verdict: Verdict, before: Condition | None, thresholds: HealthThresholds, now: float
) -> Verdict:
    """Keep GpuXid True for ``xid_hold_s`` after a critical Xid, though no new one came."""
    if verdict.status is TRUE or before is None or before.status is not TRUE:
        return verdict
    if now - before.last_transition_time >= thresholds.xid_hold_s:
        return verdict
    return Verdict(
        TRUE,
        HealthReason.XID_CRITICAL_RECENT,
        f"a critical Xid within the last {thresholds.xid_hold_s:g} s ({before.message})",
    )


def conclude(
    check: CheckType, verdict: Verdict, now: float, before: Mapping[CheckType, Condition]
) -> Condition:
    """The verdict as a condition; ``lastTransitionTime`` is kept while the status holds."""
    old = before.get(check)
    since = old.last_transition_time if old is not None and old.status is verdict.status else now
    return Condition(
        type=check,
        status=verdict.status,
        reason=verdict.reason.value,
        message=verdict.message,
        last_transition_time=since,
    )


def judge(
    check: CheckType,
    reading: NodeReading,
    previous: NodeReading | None,
    thresholds: HealthThresholds,
    expected_gpus: int | None,
    now: float,
    before: Mapping[CheckType, Condition],
) -> Condition:
    """One check's condition (the unit the agent runs under a timeout)."""
    verdict = CHECKS[check](reading, previous, thresholds, expected_gpus)
    if check is CheckType.GPU_XID:
        verdict = hold_xid(verdict, before.get(check), thresholds, now)
    return conclude(check, verdict, now, before)


def evaluate(
    reading: NodeReading,
    previous: NodeReading | None,
    thresholds: HealthThresholds,
    expected_gpus: int | None,
    now: float,
    before: Mapping[CheckType, Condition],
) -> list[Condition]:
    """Every check's condition for one node's reading, in ``CHECKS`` order."""
    return [
        judge(check, reading, previous, thresholds, expected_gpus, now, before) for check in CHECKS
    ]
