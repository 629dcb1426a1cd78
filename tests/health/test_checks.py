"""The GPU checks as tables: a reading (and the one before) -> each check's status and reason."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kiban.domain.errors import SpecError
from kiban.health.checks import CHECKS, HealthReason, evaluate
from kiban.health.conditions import CheckType, Condition, ConditionStatus
from kiban.health.readings import NodeReading, XidEvent
from kiban.health.thresholds import HealthThresholds, load_thresholds
from kiban.testing.health import healthy_gpu, node_reading, with_gpu

T, F, U = ConditionStatus.TRUE, ConditionStatus.FALSE, ConditionStatus.UNKNOWN
NOW = 1_700_000_100.0
LIMITS = HealthThresholds()


@dataclass(frozen=True)
class Case:
    name: str
    check: CheckType
    reading: NodeReading
    status: ConditionStatus
    reason: HealthReason
    previous: NodeReading | None = None
    expected_gpus: int | None = 8
    thresholds: HealthThresholds = LIMITS
    message: str = ""  # a part the message must contain


HEALTHY = node_reading(gpus=8)
NO_NVML = NodeReading(node="n", taken_at=0, nvml_available=False, error="NVML not found")


def fault(index: int = 3, **fields: Any) -> NodeReading:
    return with_gpu(HEALTHY, index, **fields)


def xid(*codes: int) -> tuple[XidEvent, ...]:
    return tuple(XidEvent(code=c, at=NOW - 1) for c in codes)


CASES = [
    # GpuCount
    Case("all GPUs seen", CheckType.GPU_COUNT, HEALTHY, F, HealthReason.GPU_COUNT_AS_EXPECTED),
    Case(
        "one GPU missing",
        CheckType.GPU_COUNT,
        node_reading(gpus=7),
        T,
        HealthReason.GPU_MISSING,
        message="NVML sees 7 GPUs, 8 expected",
    ),
    Case(
        "more GPUs than expected is not a fault",
        CheckType.GPU_COUNT,
        node_reading(gpus=8),
        F,
        HealthReason.GPU_COUNT_ABOVE_EXPECTED,
        expected_gpus=4,
    ),
    Case(
        "expected count unknown",
        CheckType.GPU_COUNT,
        HEALTHY,
        U,
        HealthReason.EXPECTED_COUNT_UNKNOWN,
        expected_gpus=None,
    ),
    Case("count without NVML", CheckType.GPU_COUNT, NO_NVML, U, HealthReason.NVML_UNAVAILABLE),
    # GpuEcc
    Case("no ECC errors", CheckType.GPU_ECC, HEALTHY, F, HealthReason.NO_UNCORRECTABLE_ECC),
    Case(
        "volatile uncorrectable ECC",
        CheckType.GPU_ECC,
        fault(ecc_volatile_uncorrectable=2),
        T,
        HealthReason.ECC_VOLATILE_UNCORRECTABLE,
        message="GPU 3 (GPU-00000003-0000-0000-0000-000000000000): "
        "2 volatile uncorrectable ECC errors",
    ),
    Case(
        "aggregate uncorrectable rising",
        CheckType.GPU_ECC,
        fault(ecc_aggregate_uncorrectable=5),
        T,
        HealthReason.ECC_AGGREGATE_RISING,
        previous=fault(ecc_aggregate_uncorrectable=4),
        message="rose by 1 to 5",
    ),
    Case(
        "old aggregate errors that do not rise are no fault",
        CheckType.GPU_ECC,
        fault(ecc_aggregate_uncorrectable=4),
        F,
        HealthReason.NO_UNCORRECTABLE_ECC,
        previous=fault(ecc_aggregate_uncorrectable=4),
    ),
    Case(
        "aggregate above a configured ceiling",
        CheckType.GPU_ECC,
        fault(ecc_aggregate_uncorrectable=4),
        T,
        HealthReason.ECC_AGGREGATE_UNCORRECTABLE,
        thresholds=HealthThresholds(ecc_aggregate_uncorrectable_max=3),
    ),
    Case(
        "ECC not reported",
        CheckType.GPU_ECC,
        fault(ecc_volatile_uncorrectable=None),
        U,
        HealthReason.NOT_REPORTED,
        message="GPU 3",
    ),
    Case(
        "a fault on one GPU wins over another's missing field",
        CheckType.GPU_ECC,
        with_gpu(fault(1, ecc_volatile_uncorrectable=None), 2, ecc_volatile_uncorrectable=1),
        T,
        HealthReason.ECC_VOLATILE_UNCORRECTABLE,
    ),
    Case(
        "ECC of a lost GPU cannot be told",
        CheckType.GPU_ECC,
        fault(lost=True, ecc_volatile_uncorrectable=None),
        U,
        HealthReason.GPU_UNREADABLE,
    ),
    Case("ECC without NVML", CheckType.GPU_ECC, NO_NVML, U, HealthReason.NVML_UNAVAILABLE),
    Case(
        "a node with no GPU has no ECC fault",
        CheckType.GPU_ECC,
        node_reading(gpus=0),
        F,
        HealthReason.NO_GPUS,
    ),
    # GpuRowRemap
    Case("no remaps", CheckType.GPU_ROW_REMAP, HEALTHY, F, HealthReason.ROW_REMAP_OK),
    Case(
        "remap pending",
        CheckType.GPU_ROW_REMAP,
        fault(remap_pending=True),
        T,
        HealthReason.ROW_REMAP_PENDING,
    ),
    Case(
        "remap failed",
        CheckType.GPU_ROW_REMAP,
        fault(remap_failure=True, remap_pending=True),
        T,
        HealthReason.ROW_REMAP_FAILED,
    ),
    Case(
        "remap state not reported",
        CheckType.GPU_ROW_REMAP,
        fault(remap_pending=None),
        U,
        HealthReason.NOT_REPORTED,
    ),
    # GpuBus
    Case("all answer", CheckType.GPU_BUS, HEALTHY, F, HealthReason.GPUS_ANSWER),
    Case(
        "fell off the bus",
        CheckType.GPU_BUS,
        fault(5, lost=True, error="GPU is lost"),
        T,
        HealthReason.GPU_FELL_OFF_BUS,
        message="GPU 5 (GPU-00000005-0000-0000-0000-000000000000) fell off the bus: GPU is lost",
    ),
    Case(
        "does not answer",
        CheckType.GPU_BUS,
        fault(responding=False, error="timed out"),
        T,
        HealthReason.GPU_NOT_RESPONDING,
    ),
    Case("bus without NVML", CheckType.GPU_BUS, NO_NVML, U, HealthReason.NVML_UNAVAILABLE),
    # GpuPcie
    Case("full PCIe link", CheckType.GPU_PCIE, HEALTHY, F, HealthReason.PCIE_LINK_OK),
    Case(
        "link narrower than its maximum",
        CheckType.GPU_PCIE,
        fault(pcie_link_width=8),
        T,
        HealthReason.PCIE_WIDTH_DEGRADED,
        message="PCIe link x8, x16 at most",
    ),
    Case(
        "busy GPU on a slower generation",
        CheckType.GPU_PCIE,
        fault(pcie_link_gen=3, utilization_percent=90.0),
        T,
        HealthReason.PCIE_GEN_DEGRADED,
    ),
    Case(
        "idle GPU on a slower generation saves power",
        CheckType.GPU_PCIE,
        fault(pcie_link_gen=1, utilization_percent=0.0),
        F,
        HealthReason.PCIE_LINK_OK,
    ),
    Case(
        "replays rising fast",
        CheckType.GPU_PCIE,
        fault(pcie_replay_counter=1000),
        T,
        HealthReason.PCIE_REPLAY_RISING,
        previous=fault(pcie_replay_counter=10),
        message="rose by 990 to 1000",
    ),
    Case(
        "a few replays are allowed",
        CheckType.GPU_PCIE,
        fault(pcie_replay_counter=20),
        F,
        HealthReason.PCIE_LINK_OK,
        previous=fault(pcie_replay_counter=10),
    ),
    Case(
        "a high counter on the first reading is a baseline",
        CheckType.GPU_PCIE,
        fault(pcie_replay_counter=10_000),
        F,
        HealthReason.PCIE_LINK_OK,
    ),
    Case(
        "link width not reported",
        CheckType.GPU_PCIE,
        fault(pcie_link_width_max=None),
        U,
        HealthReason.NOT_REPORTED,
    ),
    # GpuFabricManager
    Case(
        "fabric completed",
        CheckType.GPU_FABRIC_MANAGER,
        HEALTHY,
        F,
        HealthReason.FABRIC_COMPLETED,
    ),
    Case(
        "fabric in progress",
        CheckType.GPU_FABRIC_MANAGER,
        fault(fabric_state="in_progress"),
        T,
        HealthReason.FABRIC_NOT_COMPLETED,
        message="NVSwitch fabric in_progress",
    ),
    Case(
        "no NVSwitch",
        CheckType.GPU_FABRIC_MANAGER,
        node_reading(gpus=[healthy_gpu(i, fabric_state=None, fabric_status="") for i in range(2)]),
        F,
        HealthReason.NO_NVSWITCH_FABRIC,
        expected_gpus=2,
    ),
    Case(
        "fabric query failed",
        CheckType.GPU_FABRIC_MANAGER,
        fault(fabric_state=None, fabric_status="NVML_ERROR_UNKNOWN"),
        U,
        HealthReason.NOT_REPORTED,
    ),
    # GpuXid
    Case("no Xid", CheckType.GPU_XID, HEALTHY, F, HealthReason.NO_XID),
    Case(
        "critical Xid 79",
        CheckType.GPU_XID,
        fault(xids=xid(13, 79)),
        T,
        HealthReason.XID_CRITICAL,
        message="critical Xid 79 (all: 13, 79)",
    ),
    Case(
        "an application's Xid 13 is recorded, not a fault",
        CheckType.GPU_XID,
        fault(xids=xid(13)),
        F,
        HealthReason.XID_NON_CRITICAL,
        message="Xid 13",
    ),
    Case(
        "critical codes are configurable",
        CheckType.GPU_XID,
        fault(xids=xid(13)),
        T,
        HealthReason.XID_CRITICAL,
        thresholds=HealthThresholds(xid_critical_codes=frozenset({13})),
    ),
    Case("Xid without NVML", CheckType.GPU_XID, NO_NVML, U, HealthReason.NVML_UNAVAILABLE),
    # GpuNvlink
    Case("links up", CheckType.GPU_NVLINK, HEALTHY, F, HealthReason.NVLINK_OK),
    Case(
        "links down",
        CheckType.GPU_NVLINK,
        fault(nvlink_links_down=2),
        T,
        HealthReason.NVLINK_DOWN,
        message="2 NVLink links down",
    ),
    Case(
        "CRC errors rising",
        CheckType.GPU_NVLINK,
        fault(nvlink_crc_errors=7),
        T,
        HealthReason.NVLINK_CRC_RISING,
        previous=fault(nvlink_crc_errors=3),
    ),
    Case(
        "CRC counter reset by a driver reload",
        CheckType.GPU_NVLINK,
        fault(nvlink_crc_errors=0),
        F,
        HealthReason.NVLINK_OK,
        previous=fault(nvlink_crc_errors=300),
    ),
    Case(
        "NVLink not reported",
        CheckType.GPU_NVLINK,
        fault(nvlink_links_down=None),
        U,
        HealthReason.NOT_REPORTED,
    ),
    # GpuThermal
    Case("not throttled", CheckType.GPU_THERMAL, HEALTHY, F, HealthReason.NOT_THROTTLED),
    Case(
        "thermal throttling",
        CheckType.GPU_THERMAL,
        fault(thermal_throttle=True, temperature_c=92.0),
        T,
        HealthReason.THERMAL_THROTTLE,
        message="thermal throttling at 92 C",
    ),
    Case(
        "power throttling",
        CheckType.GPU_THERMAL,
        fault(power_throttle=True),
        T,
        HealthReason.POWER_THROTTLE,
    ),
    Case(
        "throttle reasons not reported",
        CheckType.GPU_THERMAL,
        fault(thermal_throttle=None),
        U,
        HealthReason.NOT_REPORTED,
    ),
]


def conditions_of(case: Case) -> dict[CheckType, Condition]:
    found = evaluate(case.reading, case.previous, case.thresholds, case.expected_gpus, NOW, {})
    return {c.type: c for c in found}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_check(case: Case) -> None:
    condition = conditions_of(case)[case.check]
    assert (condition.status, condition.reason) == (case.status, case.reason.value)
    assert case.message in condition.message
    assert condition.last_transition_time == NOW


def test_every_check_has_a_true_a_false_and_an_unknown_case() -> None:
    for check in CHECKS:
        statuses = {c.status for c in CASES if c.check is check}
        assert statuses == {T, F, U}, check


@pytest.mark.parametrize("case", [c for c in CASES if c.status is T], ids=lambda c: c.name)
def test_a_fault_fails_only_its_own_check(case: Case) -> None:
    failing = {c.type for c in conditions_of(case).values() if c.status is T}
    assert failing == {case.check}


def test_without_nvml_every_check_is_unknown() -> None:
    found = evaluate(NO_NVML, None, LIMITS, 8, NOW, {})
    assert [c.type for c in found] == list(CHECKS)
    assert {c.status for c in found} == {U}
    assert {c.message for c in found} == {"NVML not found"}


def test_thermal_is_a_warning_not_a_failure() -> None:
    found = conditions_of(
        Case(
            "",
            CheckType.GPU_THERMAL,
            fault(thermal_throttle=True),
            T,
            HealthReason.THERMAL_THROTTLE,
        )
    )
    assert found[CheckType.GPU_THERMAL].status is T
    assert not found[CheckType.GPU_THERMAL].failing


def test_transition_time_is_kept_while_the_status_holds() -> None:
    first = {
        c.type: c for c in evaluate(fault(ecc_volatile_uncorrectable=1), None, LIMITS, 8, NOW, {})
    }
    later = {
        c.type: c
        for c in evaluate(fault(ecc_volatile_uncorrectable=2), None, LIMITS, 8, NOW + 30, first)
    }
    assert later[CheckType.GPU_ECC].last_transition_time == NOW
    healed = {c.type: c for c in evaluate(HEALTHY, None, LIMITS, 8, NOW + 60, later)}
    assert healed[CheckType.GPU_ECC].status is F
    assert healed[CheckType.GPU_ECC].last_transition_time == NOW + 60
    assert healed[CheckType.GPU_BUS].last_transition_time == NOW


def test_a_critical_xid_holds_the_condition_for_the_hold_time() -> None:
    limits = HealthThresholds(xid_hold_s=600)
    hit = {c.type: c for c in evaluate(fault(xids=xid(48)), None, limits, 8, NOW, {})}
    quiet = {c.type: c for c in evaluate(HEALTHY, None, limits, 8, NOW + 599, hit)}
    assert quiet[CheckType.GPU_XID].status is T
    assert quiet[CheckType.GPU_XID].reason == HealthReason.XID_CRITICAL_RECENT
    assert quiet[CheckType.GPU_XID].last_transition_time == NOW
    over = {c.type: c for c in evaluate(HEALTHY, None, limits, 8, NOW + 600, quiet)}
    assert over[CheckType.GPU_XID].status is F


counters = st.integers(min_value=0, max_value=2**40)


@given(value=counters, gpu=st.integers(min_value=0, max_value=7))
def test_a_counter_that_does_not_rise_never_fails_a_rise_check(value: int, gpu: int) -> None:
    fields = {
        "pcie_replay_counter": value,
        "nvlink_crc_errors": value,
        "ecc_aggregate_uncorrectable": value,
    }
    reading = with_gpu(HEALTHY, gpu, **fields)
    found = {c.type: c for c in evaluate(reading, reading, LIMITS, 8, NOW, {})}
    for check in (CheckType.GPU_PCIE, CheckType.GPU_NVLINK, CheckType.GPU_ECC):
        assert found[check].status is F, found[check]


@given(before=counters, now=counters)
def test_a_replay_rise_fails_exactly_when_above_the_allowance(before: int, now: int) -> None:
    found = {
        c.type: c
        for c in evaluate(
            fault(pcie_replay_counter=now), fault(pcie_replay_counter=before), LIMITS, 8, NOW, {}
        )
    }
    fails = now - before > LIMITS.pcie_replay_rise_per_pass
    assert (found[CheckType.GPU_PCIE].status is T) == fails


def test_thresholds_from_yaml(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("xid_critical_codes: [79]\npcie_replay_rise_per_pass: 5\n")
    limits = load_thresholds(path)
    assert limits.xid_critical_codes == frozenset({79})
    assert limits.pcie_replay_rise_per_pass == 5
    path.write_text("")
    assert load_thresholds(path) == HealthThresholds()


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("pcie_replay_rise_per_pass: lots\n", "pcie_replay_rise_per_pass"),
        ("xid_critical_codes: [abc]\n", "xid_critical_codes[0]"),
        ("nvlink_crc_rise: 3\n", "nvlink_crc_rise"),
        ("xid_hold_s: -1\n", "xid_hold_s"),
    ],
)
def test_bad_thresholds_name_the_field(tmp_path: Path, text: str, field: str) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as caught:
        load_thresholds(path)
    assert str(caught.value).startswith(f"{field}: "), str(caught.value)


def test_thresholds_must_be_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("- 1\n")
    with pytest.raises(SpecError, match="must be a mapping"):
        load_thresholds(path)
