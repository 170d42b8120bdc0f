"""Simulated GPUs for demos and tests (``--simulate N``): deterministic for a
seed, labelled "simulated" in every view, and never a target for signals.

With ``GPUMON_SIMULATE_STATE=PATH`` the GPUs are what that JSON file says, read again at each sample, so
a test drives their memory (the queue's tests free a GPU by writing the file):
``{"gpus": [{"total": BYTES, "used": BYTES, "util": 0, "processes": [{"pid": 1, "user": "alice",
"command": "python train.py", "used": BYTES}]}]}`` (``used`` defaults to the processes' sum).
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from pathlib import Path
from typing import Any

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


STATE_ENV = "GPUMON_SIMULATE_STATE"


def state_gpus(path: str) -> list[dict[str, Any]]:
    """The GPUs the state file lists ([] when it cannot be read: a test mid-write reads the last one next time)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return []
    gpus = data.get("gpus") if isinstance(data, dict) else None
    return [g for g in gpus if isinstance(g, dict)] if isinstance(gpus, list) else []


class SimulatedSource:
    name = "simulated"

    def __init__(self, count: int, seed: int = 0, state: str | None = None) -> None:
        self.count = count
        self.seed = seed
        self.tick = 0
        self.state = state if state is not None else os.environ.get(STATE_ENV) or None
        self._last: list[dict[str, Any]] = []

    def sample(self) -> GpuSample:
        if self.state:  # a file being rewritten reads as the last good one (a test writes it atomically anyway)
            self._last = state_gpus(self.state) or self._last
            devices = tuple(self._from_state(i, g) for i, g in enumerate(self._last))
        else:
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

    def _from_state(self, index: int, gpu: dict[str, Any]) -> GpuDevice:
        procs = tuple(
            GpuProcess(
                gpu_index=index,
                pid=int(p.get("pid", SIM_PID_BASE + index * 10 + k)),
                used_memory=int(p.get("used", 0)),
                sm_util=None,
                kind="compute",
                user=str(p.get("user", "researcher")),
                command=str(p.get("command", "python train.py")),
                simulated=True,
            )
            for k, p in enumerate(gpu.get("processes") or ())
            if isinstance(p, dict)
        )
        used = int(gpu.get("used", sum(p.used_memory or 0 for p in procs)))
        util = float(gpu.get("util", 0.0))
        return GpuDevice(
            index=index,
            name="Simulated H100 80GB HBM3",
            uuid=f"GPU-5151{self.seed:04d}-0000-0000-0000-{index:012d}",
            gpu_util=util,
            mem_util=util * 0.6,
            mem_used=used,
            mem_total=int(gpu.get("total", _TOTAL)),
            temperature=34,
            power_draw=72.0,
            power_limit=700.0,
            fan=None,
            sm_clock=345,
            mem_clock=2619,
            pstate=8,
            ecc_errors=0,
            mig_mode=False,
            processes=procs,
            na={"fan": "Not Supported"},
        )
