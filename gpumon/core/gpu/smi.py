"""Fallback source: nvidia-smi through GPUtil, for when NVML cannot be loaded
but nvidia-smi answers. It has no process list, power or clocks."""

from __future__ import annotations

import shutil
import time
from typing import Any

from gpumon.core.gpu.gpm import GPM_FIELDS
from gpumon.core.model import GpuDevice, GpuSample

_MIB = 1024 * 1024
_NO_PROCS = "process list needs NVML"


class SmiUnavailable(Exception):
    pass


class SmiSource:
    name = "nvidia-smi"

    def __init__(self, nvml_reason: str | None = None) -> None:
        if shutil.which("nvidia-smi") is None:
            raise SmiUnavailable("nvidia-smi not found")
        try:
            import GPUtil  # lazy: it shells out and needs distutils
        except ImportError as err:
            raise SmiUnavailable(f"GPUtil unavailable ({err})") from None
        self._gputil: Any = GPUtil
        self._nvml_reason = nvml_reason
        if not self._read():
            raise SmiUnavailable("nvidia-smi shows no GPU")

    def _read(self) -> list[Any]:
        try:
            return list(self._gputil.getGPUs())
        except Exception:  # noqa: BLE001 - GPUtil raises bare errors on odd nvidia-smi output
            return []

    def sample(self) -> GpuSample:
        gpus = self._read()
        devices = tuple(_device(i, g) for i, g in enumerate(gpus))
        reason = f"reading nvidia-smi: {self._nvml_reason}" if self._nvml_reason else None
        if not devices:
            reason = "nvidia-smi stopped answering"
        driver = getattr(gpus[0], "driver", None) if gpus else None
        return GpuSample(source=self.name, devices=devices, time=time.time(), reason=reason, driver=driver)

    def close(self) -> None:
        pass


def _num(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return None if out != out else out  # GPUtil writes NaN for "[N/A]"


def _device(position: int, g: Any) -> GpuDevice:
    load, used, total, temp = (_num(getattr(g, k, None)) for k in ("load", "memoryUsed", "memoryTotal", "temperature"))
    index = getattr(g, "id", position)
    return GpuDevice(
        index=int(index) if isinstance(index, int) else position,
        name=getattr(g, "name", None),
        uuid=getattr(g, "uuid", None),
        gpu_util=None if load is None else load * 100.0,
        mem_used=None if used is None else int(used * _MIB),
        mem_total=None if total is None else int(total * _MIB),
        temperature=None if temp is None else int(temp),
        processes_reason=_NO_PROCS,
        na={f: "not reported by nvidia-smi via GPUtil" for f in ("power_draw", "sm_clock", "mem_clock", "fan")}
        | dict.fromkeys(GPM_FIELDS, "SM activity needs NVML (GPM): not read through nvidia-smi"),
    )
