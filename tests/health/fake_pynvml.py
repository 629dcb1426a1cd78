"""A stand-in for the ``pynvml`` module: the functions the NVML reader calls, over fake GPUs.

Handles are the ``FakeGpu`` objects. ``fail={"nvmlDeviceGetPcieReplayCounter": NOT_SUPPORTED}``
makes that query raise ``NVMLError`` with the code, as the real binding does.
"""

from __future__ import annotations

import ctypes
from collections import deque
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

NOT_SUPPORTED, INVALID_ARGUMENT, GPU_IS_LOST, TIMEOUT, UNKNOWN = 3, 2, 15, 10, 999


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


class c_nvmlGpuFabricInfo_t(ctypes.Structure):
    _fields_ = [("status", ctypes.c_uint), ("state", ctypes.c_uint)]


@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    ecc: dict[tuple[int, int], int] = field(
        default_factory=lambda: {(1, 0): 0, (1, 1): 0, (0, 0): 0, (0, 1): 0}
    )
    remapped: tuple[int, int, int, int] = (0, 0, 0, 0)
    pcie: tuple[int, int, int, int] = (5, 5, 16, 16)  # gen, gen max, width, width max
    replays: int = 0
    fabric: tuple[int, int] | None = (3, 0)  # state, status; None: not supported
    nvlinks: list[int] = field(default_factory=lambda: [1] * 18)  # 1 up, 0 down
    crc: int = 0  # per link and counter
    nvlink_kib: tuple[int, int] | None = None  # (TX, RX) data per link up; None: unsupported
    reasons: int = 0
    utilization: int = 0
    memory: tuple[int, int] = (512 * 2**20, 80_000 * 2**20)
    temperature: int = 31
    milliwatts: int = 70_000
    fail: dict[str, int] = field(default_factory=dict)


class FakeNvml:
    """The module: ``FakeNvml([FakeGpu("GPU-a"), ...])``; ``init_error`` makes nvmlInit fail."""

    NVMLError = NVMLError
    c_nvmlGpuFabricInfo_t = c_nvmlGpuFabricInfo_t
    NVML_NVLINK_MAX_LINKS = 18
    nvmlEventTypeXidCriticalError = 8

    def __init__(self, gpus: list[FakeGpu], init_error: int | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.events: deque[SimpleNamespace] = deque()
        self.registered: list[str] = []
        self.calls: list[str] = []

    def _q(self, name: str, gpu: FakeGpu) -> None:
        self.calls.append(name)
        code = gpu.fail.get(name) or gpu.fail.get("*")
        if code is not None:
            raise NVMLError(code)

    def xid(self, gpu: int, code: int) -> None:
        """An Xid event arrives for GPU ``gpu``."""
        self.events.append(SimpleNamespace(device=self.gpus[gpu], eventType=8, eventData=code))

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"550.54.15"

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        gpu = self.gpus[index]
        self._q("nvmlDeviceGetHandleByIndex", gpu)
        return gpu

    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceRegisterEvents(self, gpu: FakeGpu, types: int, events: str) -> None:
        self.registered.append(gpu.uuid)

    def nvmlEventSetWait_v2(self, events: str, timeout_ms: int) -> SimpleNamespace:
        if not self.events:
            raise NVMLError(TIMEOUT)
        return self.events.popleft()

    def nvmlEventSetFree(self, events: str) -> None:
        pass

    def nvmlDeviceGetUUID(self, gpu: FakeGpu) -> str:
        self._q("nvmlDeviceGetUUID", gpu)
        return gpu.uuid

    def nvmlDeviceGetName(self, gpu: FakeGpu) -> bytes:
        self._q("nvmlDeviceGetName", gpu)
        return gpu.name.encode()

    def nvmlDeviceGetTotalEccErrors(self, gpu: FakeGpu, kind: int, counter: int) -> int:
        self._q("nvmlDeviceGetTotalEccErrors", gpu)
        return gpu.ecc[(kind, counter)]

    def nvmlDeviceGetRemappedRows(self, gpu: FakeGpu) -> tuple[int, int, int, int]:
        self._q("nvmlDeviceGetRemappedRows", gpu)
        return gpu.remapped

    def nvmlDeviceGetCurrPcieLinkGeneration(self, gpu: FakeGpu) -> int:
        self._q("nvmlDeviceGetCurrPcieLinkGeneration", gpu)
        return gpu.pcie[0]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, gpu: FakeGpu) -> int:
        self._q("nvmlDeviceGetMaxPcieLinkGeneration", gpu)
        return gpu.pcie[1]

    def nvmlDeviceGetCurrPcieLinkWidth(self, gpu: FakeGpu) -> int:
        self._q("nvmlDeviceGetCurrPcieLinkWidth", gpu)
        return gpu.pcie[2]

    def nvmlDeviceGetMaxPcieLinkWidth(self, gpu: FakeGpu) -> int:
        self._q("nvmlDeviceGetMaxPcieLinkWidth", gpu)
        return gpu.pcie[3]

    def nvmlDeviceGetPcieReplayCounter(self, gpu: FakeGpu) -> int:
        self._q("nvmlDeviceGetPcieReplayCounter", gpu)
        return gpu.replays

    def nvmlDeviceGetGpuFabricInfo(self, gpu: FakeGpu, ref: Any) -> int:
        self._q("nvmlDeviceGetGpuFabricInfo", gpu)
        if gpu.fabric is None:
            raise NVMLError(NOT_SUPPORTED)
        ref._obj.state, ref._obj.status = gpu.fabric
        return 0

    def nvmlDeviceGetNvLinkState(self, gpu: FakeGpu, link: int) -> int:
        self._q("nvmlDeviceGetNvLinkState", gpu)
        if link >= len(gpu.nvlinks):
            raise NVMLError(INVALID_ARGUMENT)
        return gpu.nvlinks[link]

    def nvmlDeviceGetNvLinkErrorCounter(self, gpu: FakeGpu, link: int, counter: int) -> int:
        self._q("nvmlDeviceGetNvLinkErrorCounter", gpu)
        return gpu.crc

    def nvmlDeviceGetFieldValues(
        self, gpu: FakeGpu, wanted: list[tuple[int, int]]
    ) -> list[SimpleNamespace]:
        """The NVLink data throughput fields (138 TX, 139 RX) of each link, as unsigned long
        longs; every other field, or a GPU without them, answers NOT_SUPPORTED per field."""
        self._q("nvmlDeviceGetFieldValues", gpu)
        values = []
        for field_id, link in wanted:
            kib = gpu.nvlink_kib
            ok = kib is not None and field_id in (138, 139) and link < len(gpu.nvlinks)
            amount = kib[field_id - 138] if ok and kib is not None else 0
            values.append(
                SimpleNamespace(
                    fieldId=field_id,
                    scopeId=link,
                    valueType=3,  # NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
                    nvmlReturn=0 if ok else NOT_SUPPORTED,
                    value=SimpleNamespace(ullVal=amount),
                )
            )
        return values

    def nvmlDeviceGetCurrentClocksEventReasons(self, gpu: FakeGpu) -> int:
        self._q("nvmlDeviceGetCurrentClocksEventReasons", gpu)
        return gpu.reasons

    def nvmlDeviceGetUtilizationRates(self, gpu: FakeGpu) -> SimpleNamespace:
        self._q("nvmlDeviceGetUtilizationRates", gpu)
        return SimpleNamespace(gpu=gpu.utilization, memory=0)

    def nvmlDeviceGetMemoryInfo(self, gpu: FakeGpu) -> SimpleNamespace:
        self._q("nvmlDeviceGetMemoryInfo", gpu)
        used, free = gpu.memory
        return SimpleNamespace(used=used, free=free, total=used + free)

    def nvmlDeviceGetTemperature(self, gpu: FakeGpu, sensor: int) -> int:
        self._q("nvmlDeviceGetTemperature", gpu)
        return gpu.temperature

    def nvmlDeviceGetPowerUsage(self, gpu: FakeGpu) -> int:
        self._q("nvmlDeviceGetPowerUsage", gpu)
        return gpu.milliwatts
