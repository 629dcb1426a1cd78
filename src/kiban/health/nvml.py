"""Read a node's GPUs through NVML (``nvidia-ml-py``, module ``pynvml``) into a ``NodeReading``.

Every query is wrapped: one NVML does not support leaves its field None (the checks then say
Unknown), a GPU-lost error marks the GPU ``lost`` (GpuBus), a timeout marks it not
``responding``. Where NVML cannot be loaded at all the reading says so
(``nvml_available=False``) and every check is Unknown. Xid events come from an NVML event set
kept open across passes; each reading carries those that arrived since its node's last reading.

The ``pynvml`` module is injected (``NvmlReader(nvml=fake)``) so the mapping is tested without a
GPU; by default the real one is imported when the reader opens.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kiban.clock import Clock, SystemClock
from kiban.health.readings import GpuReading, NodeReading, XidEvent

log = logging.getLogger(__name__)

# NVML's return codes (nvml.h), as NVMLError.value carries them
INVALID_ARGUMENT = 2  # NVML_ERROR_INVALID_ARGUMENT: e.g. an NVLink the GPU does not have
NOT_SUPPORTED = 3  # NVML_ERROR_NOT_SUPPORTED
TIMEOUT = 10  # NVML_ERROR_TIMEOUT
FUNCTION_NOT_FOUND = 13  # NVML_ERROR_FUNCTION_NOT_FOUND: an older driver
GPU_IS_LOST = 15  # NVML_ERROR_GPU_IS_LOST
FABRIC_STATES = {1: "not_started", 2: "in_progress", 3: "completed"}  # 0: not supported
THERMAL_REASONS = 0x20 | 0x40  # SwThermalSlowdown | HwThermalSlowdown
POWER_REASONS = 0x04 | 0x80  # SwPowerCap | HwPowerBrakeSlowdown
CRC_COUNTERS = (2, 3)  # NVML_NVLINK_ERROR_DL_CRC_FLIT, NVML_NVLINK_ERROR_DL_CRC_DATA
# NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, _RX (nvml.h): data sent and received over one link
# (the field value's scopeId), in KiB
NVLINK_DATA_FIELDS = (138, 139)
SUCCESS = 0  # NVML_SUCCESS: a field value's own nvmlReturn
# nvmlValueType_t -> the member of nvmlValue_t holding the value
VALUE_MEMBERS = {
    0: "dVal",
    1: "uiVal",
    2: "ulVal",
    3: "ullVal",
    4: "sllVal",
    5: "siVal",
    6: "usVal",
}
XID_EVENTS_KEPT = 4096  # the newest Xid events remembered for the nodes not read yet
MIB = 2**20


class GpuLost(Exception):
    """NVML said the GPU is lost: no later query of it will answer."""


@dataclass
class GpuQueries:
    """Queries of one GPU, each answering None where NVML cannot tell."""

    nvml: Any
    handle: Any
    lost: bool = False
    responding: bool = True
    errors: list[str] = field(default_factory=list)

    def ask(self, name: str, *args: Any) -> Any:
        """``pynvml.<name>(handle, *args)``, or None when it fails (noting why)."""
        if self.lost:
            return None
        function = getattr(self.nvml, name, None)
        if function is None:  # an older nvidia-ml-py
            return None
        try:
            return function(self.handle, *args)
        except self.nvml.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code == GPU_IS_LOST:
                self.lost = True
                self.errors.append(f"{name}: GPU is lost")
            elif code == TIMEOUT:
                self.responding = False
                self.errors.append(f"{name}: timed out")
            return None
        except Exception as exc:  # a binding that breaks differently: that field is unknown
            log.debug("NVML %s failed: %s", name, exc)
            return None


class NvmlReader:
    """NVML, opened once and read every pass; ``close()`` releases it."""

    def __init__(self, nvml: Any | None = None, clock: Clock | None = None) -> None:
        self._nvml: Any = nvml
        self._clock = clock or SystemClock()
        self._lock = threading.Lock()
        self._opened = False
        self._error = ""
        self._driver = ""
        self._events: Any = None
        self._xids: list[tuple[int, str, XidEvent]] = []  # (sequence, GPU UUID, event)
        self._sequence = 0
        self._seen: dict[str, int] = {}  # node -> the last sequence its reading carried

    def open(self) -> bool:
        """Load and initialise NVML; False (with the reason kept) where it cannot be."""
        if self._opened:
            return True
        try:
            if self._nvml is None:
                import pynvml

                self._nvml = pynvml
            self._nvml.nvmlInit()
        except Exception as exc:
            self._error = f"NVML unavailable: {exc}"
            return False
        self._opened = True
        self._error = ""
        self._driver = _text(_try(self._nvml.nvmlSystemGetDriverVersion) or "")
        self._open_events()
        return True

    def _open_events(self) -> None:
        nvml = self._nvml
        try:
            self._events = nvml.nvmlEventSetCreate()
        except Exception as exc:
            log.warning("no Xid events: cannot create an NVML event set: %s", exc)
            return
        for index in range(int(_try(nvml.nvmlDeviceGetCount) or 0)):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                nvml.nvmlDeviceRegisterEvents(
                    handle, nvml.nvmlEventTypeXidCriticalError, self._events
                )
            except Exception as exc:
                log.warning("no Xid events from GPU %d: %s", index, exc)

    def close(self) -> None:
        if not self._opened:
            return
        if self._events is not None:
            _try(self._nvml.nvmlEventSetFree, self._events)
            self._events = None
        _try(self._nvml.nvmlShutdown)
        self._opened = False

    def read(self, node: str, indices: Sequence[int] | None = None) -> NodeReading:
        """The GPUs ``indices`` (default: all) as node ``node`` sees them now."""
        now = self._clock.now()
        with self._lock:
            if not self.open():
                return NodeReading(node=node, taken_at=now, nvml_available=False, error=self._error)
            nvml = self._nvml
            try:
                count = int(nvml.nvmlDeviceGetCount())
            except Exception as exc:
                return NodeReading(
                    node=node, taken_at=now, nvml_available=False, error=f"NVML: {exc}"
                )
            self._drain_events(now)
            wanted = range(count) if indices is None else [i for i in indices if i < count]
            gpus = tuple(self._read_gpu(i) for i in wanted)
            gpus = self._with_xids(node, gpus)
        return NodeReading(
            node=node, taken_at=now, nvml_available=True, driver_version=self._driver, gpus=gpus
        )

    def _drain_events(self, now: float) -> None:
        """Move every Xid event waiting in the event set into the kept list."""
        if self._events is None:
            return
        nvml = self._nvml
        wait = getattr(nvml, "nvmlEventSetWait_v2", None) or nvml.nvmlEventSetWait
        while True:
            try:
                data = wait(self._events, 0)
            except Exception:  # NVML_ERROR_TIMEOUT: nothing more waiting
                return
            uuid = _text(_try(nvml.nvmlDeviceGetUUID, data.device) or "")
            self._sequence += 1
            self._xids.append((self._sequence, uuid, XidEvent(code=int(data.eventData), at=now)))
            del self._xids[:-XID_EVENTS_KEPT]

    def _with_xids(self, node: str, gpus: tuple[GpuReading, ...]) -> tuple[GpuReading, ...]:
        """Each GPU with the Xid events that arrived since this node's previous reading."""
        last = self._seen.get(node, 0)
        self._seen[node] = self._sequence
        new = [(uuid, event) for seq, uuid, event in self._xids if seq > last]
        if not new:
            return gpus
        return tuple(
            gpu.model_copy(update={"xids": tuple(e for u, e in new if u == gpu.uuid)})
            if any(u == gpu.uuid for u, _ in new)
            else gpu
            for gpu in gpus
        )

    def _read_gpu(self, index: int) -> GpuReading:
        nvml = self._nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
        except nvml.NVMLError as exc:
            lost = getattr(exc, "value", None) == GPU_IS_LOST
            return GpuReading(index=index, lost=lost, responding=False, error=str(exc))
        q = GpuQueries(nvml, handle)
        fields: dict[str, Any] = {
            "index": index,
            "uuid": _text(q.ask("nvmlDeviceGetUUID") or ""),
            "model": _text(q.ask("nvmlDeviceGetName") or ""),
        }
        fields.update(_ecc(q))
        fields.update(_row_remap(q))
        fields.update(
            pcie_link_gen=q.ask("nvmlDeviceGetCurrPcieLinkGeneration"),
            pcie_link_gen_max=q.ask("nvmlDeviceGetMaxPcieLinkGeneration"),
            pcie_link_width=q.ask("nvmlDeviceGetCurrPcieLinkWidth"),
            pcie_link_width_max=q.ask("nvmlDeviceGetMaxPcieLinkWidth"),
            pcie_replay_counter=q.ask("nvmlDeviceGetPcieReplayCounter"),
        )
        fields.update(_fabric(q))
        fields.update(_nvlink(q))
        fields.update(_throttle(q))
        fields.update(_telemetry(q))
        return GpuReading(**fields, lost=q.lost, responding=q.responding, error="; ".join(q.errors))


def _ecc(q: GpuQueries) -> dict[str, int | None]:
    get = "nvmlDeviceGetTotalEccErrors"
    uncorrected, corrected = 1, 0  # NVML_MEMORY_ERROR_TYPE_*
    volatile, aggregate = 0, 1  # NVML_VOLATILE_ECC, NVML_AGGREGATE_ECC
    return {
        "ecc_volatile_uncorrectable": q.ask(get, uncorrected, volatile),
        "ecc_aggregate_uncorrectable": q.ask(get, uncorrected, aggregate),
        "ecc_volatile_correctable": q.ask(get, corrected, volatile),
        "ecc_aggregate_correctable": q.ask(get, corrected, aggregate),
    }


def _row_remap(q: GpuQueries) -> dict[str, Any]:
    rows = q.ask("nvmlDeviceGetRemappedRows")
    if rows is None:
        return {}
    correctable, uncorrectable, pending, failure = rows
    return {
        "remapped_rows_correctable": int(correctable),
        "remapped_rows_uncorrectable": int(uncorrectable),
        "remap_pending": bool(pending),
        "remap_failure": bool(failure),
    }


def _fabric(q: GpuQueries) -> dict[str, Any]:
    """NVSwitch fabric state; None without a fabric, and None with the error if the query
    failed in a way that does not say there is none."""
    struct = getattr(q.nvml, "c_nvmlGpuFabricInfo_t", None)
    if struct is None or getattr(q.nvml, "nvmlDeviceGetGpuFabricInfo", None) is None:
        return {}
    info = struct()
    try:
        q.nvml.nvmlDeviceGetGpuFabricInfo(q.handle, ctypes.byref(info))
    except q.nvml.NVMLError as exc:
        code = getattr(exc, "value", None)
        if code == GPU_IS_LOST:
            q.lost = True
            return {}
        if code in (NOT_SUPPORTED, FUNCTION_NOT_FOUND):  # no fabric here
            return {}
        return {"fabric_status": str(exc) or f"NVML error {code}"}
    state = FABRIC_STATES.get(int(info.state))
    if state is None:
        return {}
    status = int(info.status)
    return {
        "fabric_state": state,
        "fabric_status": "success" if status == 0 else f"NVML error {status}",
    }


def _nvlink(q: GpuQueries) -> dict[str, Any]:
    """Links that exist and are down, the CRC errors summed over the links that are up, and
    the data those links carried (``_nvlink_data_kib``). A GPU without NVLink (every link
    unsupported) has none down, no errors, and no bandwidth figure."""
    links = int(getattr(q.nvml, "NVML_NVLINK_MAX_LINKS", 18))
    down = crc = 0
    up: list[int] = []
    answered = False
    for link in range(links):
        if q.lost:
            return {}
        try:
            state = q.nvml.nvmlDeviceGetNvLinkState(q.handle, link)
        except q.nvml.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code == GPU_IS_LOST:
                q.lost = True
                return {}
            if code in (INVALID_ARGUMENT, NOT_SUPPORTED):  # no such link
                answered = True
                continue
            return {}  # cannot tell: leave the NVLink fields unknown
        except Exception:
            return {}
        answered = True
        if int(state) != 1:  # NVML_FEATURE_ENABLED
            down += 1
            continue
        up.append(link)
        for counter in CRC_COUNTERS:
            value = q.ask("nvmlDeviceGetNvLinkErrorCounter", link, counter)
            if value is None:
                return {"nvlink_links_down": down}
            crc += int(value)
    if not answered:
        return {}
    found: dict[str, Any] = {"nvlink_links_down": down, "nvlink_crc_errors": crc}
    data = _nvlink_data_kib(q, up)
    if data is not None:
        found["nvlink_bandwidth_total"] = data
    return found


def _nvlink_data_kib(q: GpuQueries, links: Sequence[int]) -> int | None:
    """KiB sent and received over ``links`` since the driver loaded, summed (NVML's NVLink
    throughput fields, one per link and direction, in one ``nvmlDeviceGetFieldValues``). None
    without links, or where NVML cannot give every one of them (an older driver or binding):
    never a partial sum, nor a 0 made up."""
    if not links:
        return None
    wanted = [(field_id, link) for link in links for field_id in NVLINK_DATA_FIELDS]
    values = q.ask("nvmlDeviceGetFieldValues", wanted)
    if values is None or len(values) != len(wanted):
        return None
    total = 0
    for value in values:
        member = VALUE_MEMBERS.get(int(value.valueType))
        if int(value.nvmlReturn) != SUCCESS or member is None:
            return None
        total += int(getattr(value.value, member))
    return total


def _throttle(q: GpuQueries) -> dict[str, Any]:
    reasons = q.ask("nvmlDeviceGetCurrentClocksEventReasons")
    if reasons is None:
        reasons = q.ask("nvmlDeviceGetCurrentClocksThrottleReasons")
    if reasons is None:
        return {}
    return {
        "thermal_throttle": bool(int(reasons) & THERMAL_REASONS),
        "power_throttle": bool(int(reasons) & POWER_REASONS),
    }


def _telemetry(q: GpuQueries) -> dict[str, Any]:
    out: dict[str, Any] = {}
    rates = q.ask("nvmlDeviceGetUtilizationRates")
    if rates is not None:
        out["utilization_percent"] = float(rates.gpu)
    memory = q.ask("nvmlDeviceGetMemoryInfo")
    if memory is not None:
        out["memory_used_mib"] = memory.used / MIB
        out["memory_free_mib"] = memory.free / MIB
    temperature = q.ask("nvmlDeviceGetTemperature", 0)  # NVML_TEMPERATURE_GPU
    if temperature is not None:
        out["temperature_c"] = float(temperature)
    milliwatts = q.ask("nvmlDeviceGetPowerUsage")
    if milliwatts is not None:
        out["power_w"] = milliwatts / 1000.0
    return out


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _try(function: Callable[..., Any], *args: Any) -> Any:
    try:
        return function(*args)
    except Exception:
        return None
