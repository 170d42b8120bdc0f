"""Several vendors' sources as one: devices numbered on from one source to the next, in order
(NVIDIA's first, as CUDA numbers them), each keeping its ``vendor``."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from gpumon.core.model import GpuSample


class CombinedSource:
    def __init__(self, sources: list[Any]) -> None:
        self.sources = sources
        self.name = "+".join(s.name for s in sources)

    def prime(self) -> None:
        for s in self.sources:
            prime = getattr(s, "prime", None)
            if prime is not None:
                prime()

    def sample(self) -> GpuSample:
        devices: list[Any] = []
        reasons, drivers = [], []
        for s in self.sources:
            got = s.sample()
            offset = len(devices)
            for d in got.devices:
                procs = tuple(dataclasses.replace(p, gpu_index=p.gpu_index + offset) for p in d.processes)
                devices.append(dataclasses.replace(d, index=d.index + offset, processes=procs))
            if got.reason:
                reasons.append(got.reason)
            if got.driver:
                drivers.append(got.driver)
        return GpuSample(
            source=self.name,
            devices=tuple(devices),
            time=time.time(),
            reason="; ".join(reasons) or None,
            driver="; ".join(drivers) or None,
        )

    def close(self) -> None:
        for s in self.sources:
            s.close()
