"""NVML source (nvidia-ml-py). Every call is guarded: a failing value reads as
N/A with its reason, a lost GPU is marked lost while the others stay live."""

from __future__ import annotations

import contextlib
import importlib
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from gpumon.core.gpu.gpm import GpmReader
from gpumon.core.model import GpuDevice, GpuProcess, GpuSample
from gpumon.core.procinfo import ProcessInfoCache

# Newest first: drivers older than the library lack the newer symbols.
COMPUTE_PROC_APIS = (
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetComputeRunningProcesses",
)
_MIG_ENABLED = 1


class NvmlUnavailable(Exception):
    """NVML cannot be used at all; the message is shown to the user."""


class _DeviceLost(Exception):
    pass


def init_failure_reason(nv: ModuleType, err: BaseException) -> str:
    if isinstance(err, nv.NVMLError_LibraryNotFound):
        return "NVML library not found (is the NVIDIA driver installed?)"
    if isinstance(err, nv.NVMLError_DriverNotLoaded):
        return "NVIDIA driver not loaded"
    if isinstance(err, nv.NVMLError_NoPermission):
        return "no permission to use the NVIDIA driver"
    return f"NVML failed to start: {err}"


class NvmlSource:
    name = "nvml"

    def __init__(self, nvml: ModuleType | None = None) -> None:
        try:
            nv = nvml if nvml is not None else importlib.import_module("pynvml")
        except ImportError:
            raise NvmlUnavailable("nvidia-ml-py is not installed") from None
        self._nv = nv
        try:
            nv.nvmlInit()
        except nv.NVMLError as err:
            raise NvmlUnavailable(init_failure_reason(nv, err)) from None
        except OSError as err:  # a broken libnvidia-ml.so
            raise NvmlUnavailable(f"NVML library could not be loaded: {err}") from None
        try:
            count = int(nv.nvmlDeviceGetCount())
        except nv.NVMLError as err:
            self.close()
            raise NvmlUnavailable(f"NVML could not count GPUs: {err}") from None
        if count == 0:
            self.close()
            raise NvmlUnavailable("NVML sees no GPU")
        self.count = count
        self.driver = self._guard(nv.nvmlSystemGetDriverVersion)
        self._handles: dict[int, Any] = {}
        self._static: dict[int, tuple[str | None, str | None]] = {}
        self._lost: dict[int, str] = {}
        self._unsupported: set[tuple[int, str]] = set()
        self._last_seen: dict[int, int] = {}  # per-process utilisation timestamps
        self._proc_api: str | None = None
        self._proc_api_error: Exception | None = None
        self._procinfo = ProcessInfoCache()
        self._gpm = GpmReader(nv, _DeviceLost)

    def _guard(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return _text(fn(*args))
        except self._nv.NVMLError:
            return None

    def close(self) -> None:
        with contextlib.suppress(Exception):  # shutting down must never fail loudly
            if hasattr(self, "_gpm"):
                self._gpm.close()
            self._nv.nvmlShutdown()

    def prime(self) -> None:
        """Take each GPU's first GPM sample now, so that the next ``sample()`` has SM activity (a one-shot read)."""
        for index in range(self.count):
            with contextlib.suppress(Exception):  # sample() says what fails
                h = self._handle(index)
                mig = self._guard(self._nv.nvmlDeviceGetMigMode, h)
                self._gpm.read(index, h, None if mig is None else int(mig[0]) == _MIG_ENABLED)

    # -- sampling -----------------------------------------------------------
    def sample(self) -> GpuSample:
        devices = []
        live_pids: set[int] = set()
        for index in range(self.count):
            dev = self._sample_device(index)
            live_pids.update(p.pid for p in dev.processes)
            devices.append(dev)
        self._procinfo.forget_others(live_pids)
        lost = [d.index for d in devices if d.state != "ok"]
        reason = f"GPU {', '.join(map(str, lost))} not readable" if lost else None
        return GpuSample(source=self.name, devices=tuple(devices), time=time.time(), reason=reason, driver=self.driver)

    def _sample_device(self, index: int) -> GpuDevice:
        if index not in self._lost:
            try:
                return self._read_device(index)
            except _DeviceLost:
                self._lost[index] = "GPU is lost (NVML_ERROR_GPU_IS_LOST): reset or reboot needed"
            except self._nv.NVMLError as err:  # the handle itself cannot be had
                return GpuDevice(index, None, None, state="error", reason=f"NVML: {err}")
        name, uuid = self._static.get(index, (None, None))
        return GpuDevice(index, name, uuid, state="lost", reason=self._lost[index])

    def _handle(self, index: int) -> Any:
        handle = self._handles.get(index)
        if handle is None:
            try:
                handle = self._nv.nvmlDeviceGetHandleByIndex(index)
            except self._nv.NVMLError_GpuIsLost:
                raise _DeviceLost from None
            self._handles[index] = handle
        return handle

    def _read(self, index: int, field: str, na: dict[str, str], fn: Callable[..., Any], *args: Any) -> Any:
        if (index, field) in self._unsupported:
            na[field] = "Not Supported"
            return None
        nv = self._nv
        try:
            return fn(*args)
        except nv.NVMLError_GpuIsLost:
            raise _DeviceLost from None
        except (nv.NVMLError_NotSupported, nv.NVMLError_FunctionNotFound) as err:
            self._unsupported.add((index, field))  # never ask again: saves a call per tick
            na[field] = str(err)
        except nv.NVMLError as err:
            na[field] = str(err)
        return None

    def _read_device(self, index: int) -> GpuDevice:
        nv = self._nv
        h = self._handle(index)
        na: dict[str, str] = {}
        if index not in self._static:
            self._static[index] = (
                _text(self._read(index, "name", na, nv.nvmlDeviceGetName, h)),
                _text(self._read(index, "uuid", na, nv.nvmlDeviceGetUUID, h)),
            )
        name, uuid = self._static[index]
        util = self._read(index, "gpu_util", na, nv.nvmlDeviceGetUtilizationRates, h)
        mem = self._memory(index, h, na)
        power = self._read(index, "power_draw", na, nv.nvmlDeviceGetPowerUsage, h)
        limit = self._read(index, "power_limit", na, nv.nvmlDeviceGetEnforcedPowerLimit, h)
        mig = self._read(index, "mig_mode", na, nv.nvmlDeviceGetMigMode, h)
        ecc = self._read(
            index,
            "ecc_errors",
            na,
            nv.nvmlDeviceGetTotalEccErrors,
            h,
            nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            nv.NVML_VOLATILE_ECC,
        )
        mig_on = None if mig is None else int(mig[0]) == _MIG_ENABLED
        processes, proc_reason = self._processes(index, h, mig_on)
        gpm, gpm_na = self._gpm.read(index, h, mig_on)  # SM activity: what utilisation is not (gpm.py)
        na.update(gpm_na)
        return GpuDevice(
            index=index,
            name=name,
            uuid=uuid,
            gpu_util=None if util is None else float(util.gpu),
            mem_util=None if util is None else float(util.memory),
            mem_used=None if mem is None else int(mem.used),
            mem_total=None if mem is None else int(mem.total),
            temperature=self._read(index, "temperature", na, nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU),
            power_draw=None if power is None else power / 1000.0,
            power_limit=None if limit is None else limit / 1000.0,
            fan=self._read(index, "fan", na, nv.nvmlDeviceGetFanSpeed, h),
            sm_clock=self._read(index, "sm_clock", na, nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
            mem_clock=self._read(index, "mem_clock", na, nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM),
            pstate=self._read(index, "pstate", na, nv.nvmlDeviceGetPerformanceState, h),
            ecc_errors=None if ecc is None else int(ecc),
            mig_mode=mig_on,
            sm_active=gpm["sm_active"],
            sm_occupancy=gpm["sm_occupancy"],
            tensor_active=gpm["tensor_active"],
            dram_active=gpm["dram_active"],
            processes=processes,
            processes_reason=proc_reason,
            na=na,
        )

    def _memory(self, index: int, h: Any, na: dict[str, str]) -> Any:
        """Memory info v2 where the driver has it: its ``used`` leaves out the driver's reserved memory,
        as nvidia-smi does (v1 counts it as used: ~480 MiB on an idle H100 that nvidia-smi shows at 0)."""
        nv = self._nv
        v2 = getattr(nv, "nvmlMemory_v2", None)
        if v2 is not None and (index, "mem_v2") not in self._unsupported:
            try:
                return nv.nvmlDeviceGetMemoryInfo(h, version=v2)
            except nv.NVMLError_GpuIsLost:
                raise _DeviceLost from None
            except (nv.NVMLError_NotSupported, nv.NVMLError_FunctionNotFound, _version_mismatch(nv)):
                self._unsupported.add((index, "mem_v2"))  # an older driver: v1 from now on
            except nv.NVMLError as err:
                na["mem_used"] = str(err)
                return None
        return self._read(index, "mem_used", na, nv.nvmlDeviceGetMemoryInfo, h)

    # -- processes ----------------------------------------------------------
    def _compute_processes(self, h: Any) -> list[Any]:
        nv = self._nv
        if self._proc_api_error is not None:  # probed before: none works, do not ask again
            raise self._proc_api_error
        if self._proc_api is None:
            last: Exception = nv.NVMLError(nv.NVML_ERROR_FUNCTION_NOT_FOUND)
            for api in COMPUTE_PROC_APIS:
                fn = getattr(nv, api, None)
                if fn is None:
                    continue
                try:
                    procs = fn(h)
                except (nv.NVMLError_FunctionNotFound, nv.NVMLError_NotSupported) as err:
                    last = err
                    continue
                self._proc_api = api
                return list(procs)
            self._proc_api_error = last
            raise last
        return list(getattr(nv, self._proc_api)(h))

    def _processes(self, index: int, h: Any, mig_on: bool | None) -> tuple[tuple[GpuProcess, ...], str | None]:
        nv = self._nv
        na: dict[str, str] = {}
        try:
            compute = self._compute_processes(h)
        except nv.NVMLError_GpuIsLost:
            raise _DeviceLost from None
        except nv.NVMLError as err:
            return (), f"process list: {err}"
        graphics = self._read(index, "graphics_processes", na, nv.nvmlDeviceGetGraphicsRunningProcesses, h) or []
        sm = self._process_sm(index, h)
        seen: dict[int, GpuProcess] = {}
        for kind, procs in (("compute", compute), ("graphics", graphics)):
            for p in procs:
                pid = int(p.pid)
                if pid in seen:
                    continue
                used = getattr(p, "usedGpuMemory", None)
                user, command, created, parents = self._procinfo.lookup(pid)
                seen[pid] = GpuProcess(
                    gpu_index=index,
                    pid=pid,
                    used_memory=None if used is None or mig_on else int(used),
                    sm_util=None if sm is None else float(sm.get(pid, 0)),
                    kind=kind,
                    user=user,
                    command=command,
                    create_time=created,
                    parents=parents,
                )
        return tuple(seen.values()), None

    def _process_sm(self, index: int, h: Any) -> dict[int, int] | None:
        """Latest SM % per PID, from samples newer than the last one seen."""
        nv = self._nv
        if (index, "process_sm") in self._unsupported:
            return None
        try:
            samples = nv.nvmlDeviceGetProcessUtilization(h, self._last_seen.get(index, 0))
        except nv.NVMLError_NotFound:  # no sample since last time: all idle
            return {}
        except nv.NVMLError_GpuIsLost:
            raise _DeviceLost from None
        except (nv.NVMLError_NotSupported, nv.NVMLError_FunctionNotFound):
            self._unsupported.add((index, "process_sm"))
            return None
        except nv.NVMLError:
            return None
        latest: dict[int, tuple[int, int]] = {}
        for s in samples:
            ts = int(s.timeStamp)
            if ts >= latest.get(int(s.pid), (-1, 0))[0]:
                latest[int(s.pid)] = (ts, int(s.smUtil))
            self._last_seen[index] = max(self._last_seen.get(index, 0), ts)
        return {pid: util for pid, (_, util) in latest.items()}


def _version_mismatch(nv: ModuleType) -> type[Exception]:
    return getattr(nv, "NVMLError_ArgumentVersionMismatch", nv.NVMLError_NotSupported)  # absent in old pynvml


def _text(value: Any) -> Any:
    return value.decode(errors="replace") if isinstance(value, bytes) else value
