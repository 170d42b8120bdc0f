"""GPU sources behind one small interface.

``open_gpu_source`` picks, in order: the simulated source (only when asked),
NVML, nvidia-smi through GPUtil, and finally a source that reports no GPU and
says why. No source ever raises out of ``sample``.
"""

from __future__ import annotations

import time
from typing import Protocol

from gpumon.core.model import GpuSample


class GpuSource(Protocol):
    name: str

    def sample(self) -> GpuSample: ...

    def close(self) -> None: ...


class NoGpuSource:
    """Stands in when no GPU can be read; carries the reason to every view."""

    name = "none"

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def sample(self) -> GpuSample:
        return GpuSample(source=self.name, devices=(), time=time.time(), reason=self.reason)

    def close(self) -> None:
        pass


class OwnedSource:
    """A source whose processes carry their owners (container, pod, Slurm job: core/owners.py); the rest of the
    source (``prime``, ``count``) as it is."""

    def __init__(self, inner: GpuSource) -> None:
        from gpumon.core.owners import Owners

        self.inner = inner
        self.name = inner.name
        self.owners = Owners()

    def sample(self) -> GpuSample:
        return self.owners.attribute(self.inner.sample())

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def open_gpu_source(simulate: int | None = None, seed: int = 0) -> GpuSource:
    """The first source that answers, its processes with their owners."""
    return OwnedSource(_open_source(simulate, seed))


def _open_source(simulate: int | None, seed: int) -> GpuSource:
    import os

    if simulate or os.environ.get("GPUMON_SIMULATE_STATE"):  # the state file: GPUs a test drives (simulated.py)
        from gpumon.core.gpu.simulated import SimulatedSource

        return SimulatedSource(simulate or 0, seed=seed)

    from gpumon.core.gpu.nvml import NvmlSource, NvmlUnavailable

    try:
        return NvmlSource()
    except NvmlUnavailable as exc:
        nvml_reason = str(exc)

    from gpumon.core.gpu.smi import SmiSource, SmiUnavailable

    try:
        return SmiSource(nvml_reason)
    except SmiUnavailable as exc:
        return NoGpuSource(f"{nvml_reason}; {exc}")


def visible_gpu_count() -> int:
    """GPUs a new CUDA process would see: CUDA_VISIBLE_DEVICES if set, else NVML's count (0 without NVML)."""
    import os

    masked = os.environ.get("CUDA_VISIBLE_DEVICES")
    if masked is not None:
        return len([d for d in masked.split(",") if d.strip() and d.strip() != "-1"])
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - any NVML failure means no GPU to launch on
        return 0
