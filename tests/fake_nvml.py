"""A fake ``pynvml`` for NvmlSource, so NVML paths run on machines without a GPU.

The fake has pynvml's real call names and raises pynvml's REAL error classes
(``pynvml.NVMLError`` and its generated subclasses are re-exported on the fake,
with every ``NVML_*`` constant), so ``except nv.NVMLError_NotSupported`` in
gpumon behaves exactly as it would against the driver.

Per device one configures values (``FakeDevice`` fields) and which call raises
what (``FakeDevice.errors``: pynvml call name -> exception class or instance).
Every call is recorded in ``FakeNvml.calls`` as ``(name, device index | None, args)``.

    fake = FakeNvml([FakeDevice(), FakeDevice(name=b"NVIDIA A100")])
    fake.devices[1].errors["nvmlDeviceGetFanSpeed"] = pynvml.NVMLError_NotSupported
    source = NvmlSource(nvml=fake)
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any

import pynvml

GIB = 1024**3

#: Every process-list call gpumon may use, newest first.
COMPUTE_PROC_APIS = (
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetComputeRunningProcesses",
)


def nvml_error(code: int) -> pynvml.NVMLError:
    """The exception pynvml itself raises for ``code`` (its subclass, e.g. NVMLError_GpuIsLost)."""
    return pynvml.NVMLError(code)


def proc(pid: int, used_memory: int | None = 1 * GIB) -> Any:
    """A process entry as pynvml returns it from nvmlDeviceGet*RunningProcesses."""
    return pynvml.nvmlFriendlyObject(
        {"pid": pid, "usedGpuMemory": used_memory, "gpuInstanceId": 0xFFFFFFFF, "computeInstanceId": 0xFFFFFFFF}
    )


def util_sample(pid: int, time_stamp: int, sm_util: int, mem_util: int = 0) -> Any:
    """A per-process utilisation sample as nvmlDeviceGetProcessUtilization returns it."""
    return pynvml.c_nvmlProcessUtilizationSample_t(pid, time_stamp, sm_util, mem_util, 0, 0)


@dataclass
class FakeHandle:
    index: int


@dataclass
class FakeDevice:
    name: bytes | str = b"NVIDIA H100 80GB HBM3"
    uuid: bytes | str = b"GPU-00000000-1111-2222-3333-444444444444"
    gpu_util: int = 57
    mem_util: int = 31
    mem_total: int = 80 * GIB
    mem_used: int = 20 * GIB
    mem_reserved: int = 0  # the driver's own; memory info v1 counts it as used, v2 apart
    temperature: int = 61
    power_mw: int = 312_500
    power_limit_mw: int = 700_000
    fan: int = 45
    sm_clock: int = 1980
    mem_clock: int = 2619
    pstate: int = 0
    ecc_errors: int = 0
    mig_mode: tuple[int, int] = (0, 0)  # (current, pending); 1 = enabled
    compute: list[Any] = field(default_factory=list)
    graphics: list[Any] = field(default_factory=list)
    util_samples: list[Any] = field(default_factory=list)
    gpm_supported: bool = True  # nvmlGpmQueryDeviceSupport's isSupportedDevice (Hopper and later)
    gpm: dict[int, float] = field(  # NVML_GPM_METRIC_* -> percent between two samples
        default_factory=lambda: {
            pynvml.NVML_GPM_METRIC_SM_UTIL: 42.0,
            pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: 21.0,
            pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 30.0,
            pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: 18.0,
        }
    )
    #: pynvml call name -> exception class or instance to raise
    errors: dict[str, Any] = field(default_factory=dict)


@dataclass
class FakeGpmSample:
    """What nvmlGpmSampleAlloc hands out: which device filled it, how many times."""

    device: int | None = None
    taken: int = 0


@dataclass
class FakeGpmMetric:
    metricId: int = 0  # pynvml's field names
    nvmlReturn: int = 0
    value: float = 0.0


class FakeGpmMetricsGet:
    """pynvml's c_nvmlGpmMetricsGet_t as plain attributes (its samples are the fake's own)."""

    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: Any = None
        self.sample2: Any = None
        self.metrics = [FakeGpmMetric() for _ in range(pynvml.NVML_GPM_METRIC_MAX)]


class FakeNvml(types.ModuleType):
    """Stands in for the ``pynvml`` module."""

    def __init__(self, devices: list[FakeDevice] | None = None, driver: bytes | str = b"550.54.15") -> None:
        super().__init__("fake_pynvml")
        for attr in dir(pynvml):
            if attr.startswith(("NVMLError", "NVML_")):
                setattr(self, attr, getattr(pynvml, attr))
        self.nvmlMemory_v2 = pynvml.nvmlMemory_v2
        self.c_nvmlGpmMetricsGet_t = FakeGpmMetricsGet
        self.devices: list[FakeDevice] = list(devices) if devices is not None else [FakeDevice()]
        self.driver = driver
        #: calls that are not per device: name -> exception class or instance
        self.errors: dict[str, Any] = {}
        self.device_count: int | None = None  # None: len(devices)
        self.calls: list[tuple[str, int | None, tuple[Any, ...]]] = []
        self.initialized = False
        self.shutdowns = 0
        self._absent: set[str] = set()

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("nvml") and name in object.__getattribute__(self, "_absent"):
            raise AttributeError(name)
        return super().__getattribute__(name)

    # -- bookkeeping --------------------------------------------------------
    def count(self, name: str, index: int | None = None) -> int:
        """How many times ``name`` was called (on device ``index``, when given)."""
        return sum(1 for n, i, _ in self.calls if n == name and (index is None or i == index))

    def args_of(self, name: str, index: int | None = None) -> list[tuple[Any, ...]]:
        return [a for n, i, a in self.calls if n == name and (index is None or i == index)]

    def calls_on(self, index: int) -> int:
        return sum(1 for _, i, _ in self.calls if i == index)

    def remove(self, *names: str) -> None:
        """Make calls absent, as on a pynvml too old to have them."""
        for name in names:
            assert hasattr(self, name), name
            self._absent.add(name)

    @staticmethod
    def _raise(spec: Any) -> None:
        if spec is None:
            return
        raise spec() if isinstance(spec, type) else spec

    def _system(self, name: str, *args: Any) -> None:
        self.calls.append((name, None, args))
        self._raise(self.errors.get(name))

    def _dev(self, name: str, handle: FakeHandle, *args: Any) -> FakeDevice:
        assert isinstance(handle, FakeHandle), f"{name} got {handle!r}, not a handle"
        self.calls.append((name, handle.index, args))
        if not self.initialized:
            raise nvml_error(pynvml.NVML_ERROR_UNINITIALIZED)
        dev = self.devices[handle.index]
        self._raise(dev.errors.get(name))
        return dev

    # -- system -------------------------------------------------------------
    def nvmlInit(self) -> None:
        self._system("nvmlInit")
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self._system("nvmlShutdown")
        self.shutdowns += 1
        self.initialized = False

    def nvmlDeviceGetCount(self) -> int:
        self._system("nvmlDeviceGetCount")
        return len(self.devices) if self.device_count is None else self.device_count

    def nvmlSystemGetDriverVersion(self) -> bytes | str:
        self._system("nvmlSystemGetDriverVersion")
        return self.driver

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        self.calls.append(("nvmlDeviceGetHandleByIndex", index, (index,)))
        if not 0 <= index < len(self.devices):
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self._raise(self.devices[index].errors.get("nvmlDeviceGetHandleByIndex"))
        return FakeHandle(index)

    # -- device values ------------------------------------------------------
    def nvmlDeviceGetName(self, handle: FakeHandle) -> bytes | str:
        return self._dev("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> bytes | str:
        return self._dev("nvmlDeviceGetUUID", handle).uuid

    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> Any:
        d = self._dev("nvmlDeviceGetUtilizationRates", handle)
        return pynvml.c_nvmlUtilization_t(d.gpu_util, d.mem_util)

    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle, version: Any = None) -> Any:
        if version:  # pynvml calls nvmlDeviceGetMemoryInfo_v2 then
            d = self._dev("nvmlDeviceGetMemoryInfo_v2", handle, version)
            free = d.mem_total - d.mem_used - d.mem_reserved
            return pynvml.c_nvmlMemory_v2_t(version, d.mem_total, d.mem_reserved, free, d.mem_used)
        d = self._dev("nvmlDeviceGetMemoryInfo", handle, version)
        used = d.mem_used + d.mem_reserved
        return pynvml.c_nvmlMemory_t(d.mem_total, d.mem_total - used, used)

    def nvmlDeviceGetTemperature(self, handle: FakeHandle, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._dev("nvmlDeviceGetTemperature", handle, sensor).temperature

    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:
        return self._dev("nvmlDeviceGetPowerUsage", handle).power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: FakeHandle) -> int:
        return self._dev("nvmlDeviceGetEnforcedPowerLimit", handle).power_limit_mw

    def nvmlDeviceGetFanSpeed(self, handle: FakeHandle) -> int:
        return self._dev("nvmlDeviceGetFanSpeed", handle).fan

    def nvmlDeviceGetClockInfo(self, handle: FakeHandle, clock_type: int) -> int:
        d = self._dev("nvmlDeviceGetClockInfo", handle, clock_type)
        if clock_type == pynvml.NVML_CLOCK_SM:
            return d.sm_clock
        if clock_type == pynvml.NVML_CLOCK_MEM:
            return d.mem_clock
        raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetPerformanceState(self, handle: FakeHandle) -> int:
        return self._dev("nvmlDeviceGetPerformanceState", handle).pstate

    def nvmlDeviceGetTotalEccErrors(self, handle: FakeHandle, error_type: int, counter_type: int) -> int:
        return self._dev("nvmlDeviceGetTotalEccErrors", handle, error_type, counter_type).ecc_errors

    def nvmlDeviceGetMigMode(self, handle: FakeHandle) -> list[int]:
        return list(self._dev("nvmlDeviceGetMigMode", handle).mig_mode)

    # -- processes ----------------------------------------------------------
    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: FakeHandle) -> list[Any]:
        return list(self._dev("nvmlDeviceGetComputeRunningProcesses_v3", handle).compute)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: FakeHandle) -> list[Any]:
        return list(self._dev("nvmlDeviceGetComputeRunningProcesses_v2", handle).compute)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeHandle) -> list[Any]:
        return list(self._dev("nvmlDeviceGetComputeRunningProcesses", handle).compute)

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: FakeHandle) -> list[Any]:
        return list(self._dev("nvmlDeviceGetGraphicsRunningProcesses", handle).graphics)

    def nvmlDeviceGetProcessUtilization(self, handle: FakeHandle, time_stamp: int) -> list[Any]:
        """Like NVML: only samples newer than ``time_stamp``; NOT_FOUND when there are none."""
        d = self._dev("nvmlDeviceGetProcessUtilization", handle, time_stamp)
        newer = [s for s in d.util_samples if s.timeStamp > time_stamp]
        if not newer:
            raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)
        return newer

    # -- GPM (Hopper and later) ---------------------------------------------
    def nvmlGpmQueryDeviceSupport(self, handle: FakeHandle) -> Any:
        d = self._dev("nvmlGpmQueryDeviceSupport", handle)
        support = pynvml.c_nvmlGpmSupport_t()
        support.version = pynvml.NVML_GPM_SUPPORT_VERSION
        support.isSupportedDevice = int(d.gpm_supported)
        return support

    def nvmlGpmSampleAlloc(self) -> FakeGpmSample:
        self._system("nvmlGpmSampleAlloc")
        return FakeGpmSample()

    def nvmlGpmSampleFree(self, sample: FakeGpmSample) -> None:
        self._system("nvmlGpmSampleFree")

    def nvmlGpmSampleGet(self, handle: FakeHandle, sample: FakeGpmSample) -> FakeGpmSample:
        self._dev("nvmlGpmSampleGet", handle)
        sample.device, sample.taken = handle.index, sample.taken + 1
        return sample

    def nvmlGpmMetricsGet(self, get: FakeGpmMetricsGet) -> FakeGpmMetricsGet:
        """The device's ``gpm`` percents, for two samples of one device each taken once at least."""
        self._system("nvmlGpmMetricsGet")
        one, two = get.sample1, get.sample2
        assert get.version == pynvml.NVML_GPM_METRICS_GET_VERSION, get.version
        if not one.taken or not two.taken or one.device != two.device or one is two:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        values = self.devices[one.device].gpm
        for metric in get.metrics[: get.numMetrics]:
            known = metric.metricId in values
            metric.nvmlReturn = pynvml.NVML_SUCCESS if known else pynvml.NVML_ERROR_NOT_SUPPORTED
            metric.value = values.get(metric.metricId, 0.0)
        return get
