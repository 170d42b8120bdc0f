"""Simulated GPUs for demos and tests (``--simulate N``): deterministic for a
seed, labelled "simulated" in every view, and never a target for signals."""

from __future__ import annotations

import math
import random
import time

from gpumon.core.model import GpuDevice, GpuProcess, GpuSample

_GIB = 1024**3
_TOTAL = 80 * _GIB
#: Above Linux's largest pid_max (2**22), so a simulated PID can never be a real one.
SIM_PID_BASE = 5_000_000
_COMMANDS = (
    "python -m torch.distributed.run --nproc-per-node 8 train.py --model resnet50",
    "python train_llm.py --micro-batch 4 --bf16",
    "python -m trainers.ddp --preset tiny",
)


class SimulatedSource:
    name = "simulated"

    def __init__(self, count: int, seed: int = 0) -> None:
        self.count = count
        self.seed = seed
        self.tick = 0

    def sample(self) -> GpuSample:
        devices = tuple(self._device(i) for i in range(self.count))
        self.tick += 1
        return GpuSample(source=self.name, devices=devices, time=time.time(), driver="simulated")

    def close(self) -> None:
        pass

    def _device(self, index: int) -> GpuDevice:
        rng = random.Random(f"{self.seed}:{index}:{self.tick}")
        idle = index % 4 == 3  # one idle card in four, as on a real shared box
        phase = self.seed * 0.7 + index * 1.3
        if idle:
            util = 0.0
            used = 512 * 1024**2
        else:
            util = max(0.0, min(100.0, 72 + 22 * math.sin(self.tick / 9 + phase) + rng.uniform(-6, 6)))
            used = int(_TOTAL * (0.35 + 0.1 * index / max(1, self.count) + 0.0004 * self.tick))
            used = min(used, _TOTAL - _GIB)
        processes = () if idle else self._processes(index, used, util, rng)
        return GpuDevice(
            index=index,
            name="Simulated H100 80GB HBM3",
            uuid=f"GPU-5151{self.seed:04d}-0000-0000-0000-{index:012d}",
            gpu_util=round(util, 1),
            mem_util=round(util * 0.6, 1),
            mem_used=used,
            mem_total=_TOTAL,
            temperature=int(34 + util * 0.42 + rng.uniform(0, 2)),
            power_draw=round(72 + util * 6.1 + rng.uniform(-5, 5), 1),
            power_limit=700.0,
            fan=None,
            sm_clock=int(345 + util * 16.35) if util else 345,
            mem_clock=2619,
            pstate=0 if util else 8,
            ecc_errors=0,
            mig_mode=False,
            processes=processes,
            na={"fan": "Not Supported"},
        )

    def _processes(self, index: int, used: int, util: float, rng: random.Random) -> tuple[GpuProcess, ...]:
        count = 1 + (index + self.seed) % 2
        share = used // count
        return tuple(
            GpuProcess(
                gpu_index=index,
                pid=SIM_PID_BASE + index * 10 + k,
                used_memory=share - k * 1024**3,
                sm_util=round(util / count + rng.uniform(-2, 2), 0),
                kind="compute",
                user="researcher" if k == 0 else "alice",
                command=_COMMANDS[(index + k) % len(_COMMANDS)],
                simulated=True,
            )
            for k in range(count)
        )
