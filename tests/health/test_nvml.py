"""The NVML reader's mapping from NVML's answers to a reading, over a fake ``pynvml``."""

from __future__ import annotations

from fake_pynvml import (
    GPU_IS_LOST,
    NOT_SUPPORTED,
    TIMEOUT,
    UNKNOWN,
    FakeGpu,
    FakeNvml,
)

from kiban.health.checks import evaluate
from kiban.health.conditions import CheckType, ConditionStatus
from kiban.health.nvml import NvmlReader
from kiban.health.thresholds import HealthThresholds
from kiban.testing import ManualClock


def reader(*gpus: FakeGpu, clock: ManualClock | None = None) -> tuple[NvmlReader, FakeNvml]:
    nvml = FakeNvml(list(gpus))
    return NvmlReader(nvml=nvml, clock=clock or ManualClock()), nvml


def test_a_healthy_gpu_fills_every_field_the_checks_need() -> None:
    clock = ManualClock(1000.0)
    nvml_reader, _ = reader(FakeGpu("GPU-a", utilization=40), FakeGpu("GPU-b"), clock=clock)
    reading = nvml_reader.read("n1")
    assert (reading.node, reading.taken_at, reading.nvml_available) == ("n1", 1000.0, True)
    assert reading.driver_version == "550.54.15"
    gpu = reading.gpus[0]
    assert (gpu.index, gpu.uuid, gpu.model) == (0, "GPU-a", "NVIDIA H100 80GB HBM3")
    assert gpu.ecc_volatile_uncorrectable == 0 and gpu.remap_pending is False
    assert (gpu.pcie_link_width, gpu.pcie_link_width_max, gpu.pcie_replay_counter) == (16, 16, 0)
    assert (gpu.fabric_state, gpu.fabric_status) == ("completed", "success")
    assert (gpu.nvlink_links_down, gpu.nvlink_crc_errors) == (0, 0)
    assert (gpu.thermal_throttle, gpu.power_throttle) == (False, False)
    assert gpu.utilization_percent == 40.0 and gpu.memory_used_mib == 512.0
    assert gpu.temperature_c == 31.0 and gpu.power_w == 70.0
    found = evaluate(reading, None, HealthThresholds(), 2, 1000.0, {})
    assert {c.status for c in found} == {ConditionStatus.FALSE}, found


def test_faults_are_read_into_their_fields() -> None:
    sick = FakeGpu(
        "GPU-s",
        ecc={(1, 0): 2, (1, 1): 7, (0, 0): 1, (0, 1): 9},
        remapped=(1, 2, 1, 0),
        pcie=(4, 5, 8, 16),
        replays=12,
        fabric=(2, 0),
        nvlinks=[1, 0, 1, 1],
        crc=5,
        reasons=0x40 | 0x04,
    )
    reading = reader(sick)[0].read("n1")
    gpu = reading.gpus[0]
    assert (gpu.ecc_volatile_uncorrectable, gpu.ecc_aggregate_uncorrectable) == (2, 7)
    assert (gpu.ecc_volatile_correctable, gpu.ecc_aggregate_correctable) == (1, 9)
    assert (gpu.remapped_rows_correctable, gpu.remapped_rows_uncorrectable) == (1, 2)
    assert (gpu.remap_pending, gpu.remap_failure) == (True, False)
    assert (gpu.pcie_link_gen, gpu.pcie_link_width) == (4, 8)
    assert gpu.fabric_state == "in_progress"
    assert gpu.nvlink_links_down == 1
    assert gpu.nvlink_crc_errors == 5 * 2 * 3  # three links up, two CRC counters each
    assert (gpu.thermal_throttle, gpu.power_throttle) == (True, True)


def test_an_unsupported_query_leaves_only_its_field_unknown() -> None:
    gpu = FakeGpu("GPU-a", fail={"nvmlDeviceGetPcieReplayCounter": NOT_SUPPORTED})
    reading = reader(gpu)[0].read("n1")
    assert reading.gpus[0].pcie_replay_counter is None
    assert reading.gpus[0].pcie_link_width == 16
    assert not reading.gpus[0].lost and reading.gpus[0].responding
    by_type = {c.type: c for c in evaluate(reading, None, HealthThresholds(), 1, 0.0, {})}
    assert by_type[CheckType.GPU_PCIE].status is ConditionStatus.UNKNOWN
    assert by_type[CheckType.GPU_ECC].status is ConditionStatus.FALSE


def test_a_gpu_without_nvswitch_or_nvlink_has_no_fabric_and_no_links_down() -> None:
    pcie_card = FakeGpu("GPU-l4", fabric=None, nvlinks=[])
    gpu = reader(pcie_card)[0].read("n1").gpus[0]
    assert (gpu.fabric_state, gpu.fabric_status) == (None, "")
    assert (gpu.nvlink_links_down, gpu.nvlink_crc_errors) == (0, 0)


def test_nvlink_data_is_summed_over_the_links_that_are_up() -> None:
    gpu = FakeGpu("GPU-a", nvlinks=[1, 0, 1, 1], nvlink_kib=(100, 40))
    nvml_reader, nvml = reader(gpu)
    read = nvml_reader.read("n1").gpus[0]
    assert read.nvlink_bandwidth_total == 3 * (100 + 40)  # TX and RX of the three links up
    assert nvml.calls.count("nvmlDeviceGetFieldValues") == 1  # one call for all the links


def test_no_nvlink_data_where_nvml_has_none_never_a_zero() -> None:
    for gpu in (
        FakeGpu("GPU-l4", fabric=None, nvlinks=[], nvlink_kib=(1, 1)),  # no NVLink at all
        FakeGpu("GPU-down", nvlinks=[0, 0], nvlink_kib=(1, 1)),  # no link up
        FakeGpu("GPU-old"),  # a driver without the throughput fields: NOT_SUPPORTED each
        FakeGpu("GPU-x", nvlink_kib=(1, 1), fail={"nvmlDeviceGetFieldValues": NOT_SUPPORTED}),
    ):
        read = reader(gpu)[0].read("n1").gpus[0]
        assert read.nvlink_bandwidth_total is None, gpu.uuid


def test_an_unexpected_fabric_error_is_unknown_not_absent() -> None:
    gpu = (
        reader(FakeGpu("GPU-a", fail={"nvmlDeviceGetGpuFabricInfo": UNKNOWN}))[0].read("n").gpus[0]
    )
    assert gpu.fabric_state is None and gpu.fabric_status


def test_a_lost_gpu_is_marked_lost() -> None:
    lost = FakeGpu("GPU-x", fail={"nvmlDeviceGetTotalEccErrors": GPU_IS_LOST})
    reading = reader(FakeGpu("GPU-a"), lost)[0].read("n1")
    assert reading.gpus[1].lost and "GPU is lost" in reading.gpus[1].error
    assert reading.gpus[1].ecc_volatile_uncorrectable is None
    assert not reading.gpus[0].lost
    by_type = {c.type: c for c in evaluate(reading, None, HealthThresholds(), 2, 0.0, {})}
    assert by_type[CheckType.GPU_BUS].status is ConditionStatus.TRUE
    assert "GPU 1 (GPU-x) fell off the bus" in by_type[CheckType.GPU_BUS].message


def test_a_gpu_whose_handle_is_lost() -> None:
    lost = FakeGpu("GPU-x", fail={"nvmlDeviceGetHandleByIndex": GPU_IS_LOST})
    gpu = reader(lost)[0].read("n1").gpus[0]
    assert gpu.lost and not gpu.responding


def test_a_timeout_marks_the_gpu_not_responding() -> None:
    slow = FakeGpu("GPU-x", fail={"nvmlDeviceGetTemperature": TIMEOUT})
    gpu = reader(slow)[0].read("n1").gpus[0]
    assert not gpu.responding and gpu.temperature_c is None


def test_without_nvml_the_reading_says_why() -> None:
    nvml = FakeNvml([], init_error=12)
    reading = NvmlReader(nvml=nvml, clock=ManualClock(5.0)).read("n1")
    assert not reading.nvml_available
    assert reading.error.startswith("NVML unavailable")
    assert reading.taken_at == 5.0


def test_the_real_module_on_a_machine_without_a_driver() -> None:
    reading = NvmlReader().read("here")
    if reading.nvml_available:  # a GPU machine: the real reading is checked by gpu-check.sh
        assert reading.driver_version
    else:
        assert "NVML unavailable" in reading.error


def test_xid_events_reach_each_node_once_across_passes() -> None:
    nvml_reader, nvml = reader(FakeGpu("GPU-a"), FakeGpu("GPU-b"))
    nvml_reader.read("n1")
    assert nvml.registered == ["GPU-a", "GPU-b"]
    nvml.xid(1, 79)
    nvml.xid(1, 13)
    first = nvml_reader.read("n1")
    assert first.gpus[0].xids == ()
    assert [x.code for x in first.gpus[1].xids] == [79, 13]
    assert nvml_reader.read("n1").gpus[1].xids == ()
    # another node over the same GPUs (the local executor's virtual nodes) sees them too
    assert [x.code for x in nvml_reader.read("n2").gpus[1].xids] == [79, 13]


def test_indices_pick_the_node_gpus() -> None:
    nvml_reader, _ = reader(FakeGpu("GPU-a"), FakeGpu("GPU-b"), FakeGpu("GPU-c"))
    assert [g.uuid for g in nvml_reader.read("n", indices=[0, 2]).gpus] == ["GPU-a", "GPU-c"]
