"""GPU sources behind one small interface.

``open_gpu_source`` picks, for NVIDIA, in order: the simulated source (only when asked),
NVML, nvidia-smi through GPUtil, or a source that reports no GPU and says why; beside it
every other vendor present (AMD's amdgpu, Intel's i915/xe, read from the kernel's files), all
combined into one source. No source ever raises out of ``sample``.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

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

    from gpumon.core.sysroot import ROOT_ENV

    if simulate or os.environ.get("GPUMON_SIMULATE_STATE"):  # the state file: GPUs a test drives (simulated.py)
        from gpumon.core.gpu.simulated import SimulatedSource

        nvidia: GpuSource = SimulatedSource(simulate or 0, seed=seed)
        # simulated GPUs stand alone, unless a recorded tree is named to sit beside them
        others = _other_vendors() if os.environ.get(ROOT_ENV) else []
    else:
        others = _other_vendors()
        nvidia = _nvidia()
        if others and isinstance(nvidia, NoGpuSource):
            nvidia = others.pop(0)  # no NVIDIA GPU: that is no reason to show on an AMD or Intel machine
    if not others:
        return nvidia
    from gpumon.core.gpu.combined import CombinedSource

    return CombinedSource([nvidia, *others])


def _nvidia() -> GpuSource:
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


def _other_vendors() -> list[GpuSource]:
    """AMD and Intel sources for the cards present under the sysroot (none: an empty list)."""
    from gpumon.core.gpu.amd import AmdSource
    from gpumon.core.gpu.intel import IntelSource
    from gpumon.core.sysroot import SysFiles

    files = SysFiles()  # one reader for all: ``snapshot --record`` copies what any of them read
    found: list[GpuSource] = []
    for kind in (AmdSource, IntelSource):
        source = kind(files)
        if source.cards:
            found.append(source)
    return found


def sys_files(source: GpuSource) -> Any:
    """The SysFiles a source (or a combined one's parts) read, or None: what ``snapshot --record`` copies."""
    for part in getattr(source, "sources", [source]):
        files = getattr(part, "files", None)
        if files is not None:
            return files
    return None


def visible_gpu_count() -> int:
    """GPUs a new CUDA (or ROCm) process would see: CUDA_VISIBLE_DEVICES if set, else NVML's count, else the
    amdgpu cards' (0 without either)."""
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
    except Exception:  # noqa: BLE001 - any NVML failure means no NVIDIA GPU to launch on
        pass
    from gpumon.core.gpu.amd import AmdSource

    return len(AmdSource().cards)  # ROCm torch's "cuda" devices are the amdgpu cards (HIP reads CUDA_VISIBLE_DEVICES)
