"""Intel GPUs (i915 and xe) from the kernel's files, under the sysroot, where the kernel offers them.

Memory and engine use come from each process's ``/proc/PID/fdinfo`` (drm.py): i915's
``drm-engine-render`` ns and ``drm-resident-local0``, xe's ``drm-cycles-rcs``/``drm-total-cycles-rcs`` and
``drm-resident-vram0``. The card's busy % and memory in use are its clients' sums (a client we cannot
read is not counted). sysfs gives the GT clock (i915 ``gt_act_freq_mhz``, xe ``tile0/gt0/freq0/act_freq``),
xe's VRAM size (``tile0/physical_vram_size_bytes``) and the hwmon's power cap and energy counter.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gpumon.core.gpu import drm
from gpumon.core.gpu.gpm import GPM_FIELDS
from gpumon.core.model import GpuDevice, GpuProcess, GpuSample
from gpumon.core.sysroot import SysFiles

NAMES = {
    "56A0": "Intel Arc A770",
    "56A1": "Intel Arc A750",
    "56C0": "Intel Data Center GPU Flex 170",
    "56C1": "Intel Data Center GPU Flex 140",
    "0BD5": "Intel Data Center GPU Max 1550",
    "0BDA": "Intel Data Center GPU Max 1100",
    "E20B": "Intel Arc B580",
    "E20C": "Intel Arc B570",
    "A780": "Intel UHD Graphics 770",
}
#: engines counted as the GPU's compute load, by driver (fdinfo's engine class names)
ENGINES = {"i915": ("render", "compute"), "xe": ("rcs", "ccs")}
_DEVICE_MEM = ("drm-resident-local0", "drm-resident-vram0", "drm-total-local0", "drm-total-vram0")
_NEVER = {
    "mem_util": "N/A: Intel's kernel drivers do not report memory-controller busy time",
    "pstate": "N/A: P-states are NVIDIA's",
    "ecc_errors": "N/A: i915/xe do not report ECC counts in sysfs",
    "mig_mode": "N/A: MIG is NVIDIA's",
    "mem_clock": "N/A: i915/xe report no memory clock in sysfs",
} | dict.fromkeys(GPM_FIELDS, "N/A: SM activity is NVIDIA's GPM")


class IntelSource:
    name = "intel"
    vendor = "intel"

    def __init__(self, files: SysFiles | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.files = files if files is not None else SysFiles()
        self.clock = clock  # engine counters and energy are rates over this clock's time
        self.cards = drm.cards(self.files, ("i915", "xe"))
        self._rates = drm.EngineRates()
        self._energy: dict[str, tuple[float, int]] = {}  # card -> (monotonic time, microjoules)

    def sample(self) -> GpuSample:
        clients = drm.per_process(drm.clients(self.files, ("i915", "xe")))
        devices = tuple(self._device(i, card, clients) for i, card in enumerate(self.cards))
        self._rates.forget_others({(c.pid, c.pdev) for c in clients})
        drivers = "/".join(sorted({c.driver for c in self.cards}))
        release = (self.files.text("/proc/sys/kernel/osrelease") or "").strip()
        return GpuSample(source=self.name, devices=devices, time=time.time(), driver=f"{drivers} (Linux {release})")

    def prime(self) -> None:
        """A first read of the engine counters, so that the next ``sample()`` has busy percents."""
        self.sample()

    def close(self) -> None:
        pass

    def _device(self, index: int, card: drm.Card, clients: list[drm.Client]) -> GpuDevice:
        f, cdir = self.files, f"/sys/class/drm/{card.card}"
        procs = []
        busy: list[float] = []
        for c in (c for c in clients if c.pdev == card.slot):
            used = next((c.memory[k] for k in _DEVICE_MEM if k in c.memory), None)
            util = self._rates.busy(c, ENGINES[card.driver], self.clock())
            if util is not None:
                busy.append(util)
            user, command = drm.owner(f, c.pid)
            procs.append(
                GpuProcess(
                    gpu_index=index,
                    pid=c.pid,
                    used_memory=used,
                    sm_util=util,
                    kind="compute",
                    user=user,
                    command=command,
                    simulated=self.files.replayed,  # a recording's PIDs are not this machine's: never signalled
                )
            )
        hw = drm.hwmon(f, f"{cdir}/device")
        cap = f.integer(f"{hw}/power1_max") if hw else None
        total = _vram_total(f, cdir) if card.driver == "xe" else None
        mem = [p.used_memory for p in procs if p.used_memory is not None]
        values: dict[str, Any] = {
            "gpu_util": min(100.0, sum(busy)) if busy or not procs else None,
            "mem_used": sum(mem) if total is not None else None,  # clients' sum: only beside a known size
            "mem_total": total,
            "temperature": _temp(f, hw),
            "power_draw": self._power(card.card, f.integer(f"{hw}/energy1_input") if hw else None),
            "power_limit": None if not cap else cap / 1e6,
            "fan": None,
            "sm_clock": _clock(f, cdir, card.driver),
        }
        if not procs and values["gpu_util"] is not None:
            values["gpu_util"] = 0.0  # no client has work on it
        na = dict(_NEVER)
        for key, value in values.items():
            if value is None:
                na[key] = _WHY.get(key, f"N/A: {card.driver} does not report it")
        pci = card.pci_id.partition(":")[2].upper()
        return GpuDevice(
            index=index,
            name=NAMES.get(pci, f"Intel GPU 0x{pci.lower()}"),
            uuid=f"INTEL-{card.slot}",
            vendor=self.vendor,
            processes=tuple(sorted(procs, key=lambda p: p.pid)),
            na=na,
            **values,
        )

    def _power(self, card: str, microjoules: int | None) -> float | None:
        """Watts from the energy counter's change since the last sample (None on the first)."""
        if microjoules is None:
            return None
        now = self.clock()
        last = self._energy.get(card)
        self._energy[card] = (now, microjoules)
        if last is None or now <= last[0] or microjoules < last[1]:
            return None
        return (microjoules - last[1]) / 1e6 / (now - last[0])


_WHY = {
    "gpu_util": "N/A: its clients' engine time needs two samples",
    "mem_used": "N/A: i915 reports no device-memory size in sysfs (the processes' memory is in fdinfo)",
    "mem_total": "N/A: i915 reports no device-memory size in sysfs (xe: tile0/physical_vram_size_bytes)",
    "temperature": "N/A: this driver reports no temperature (xe's hwmon temp*_input on newer kernels)",
    "power_draw": "N/A: power is the hwmon energy counter's change: needs two samples (integrated GPUs have none)",
    "power_limit": "N/A: no hwmon power1_max",
    "fan": "N/A: i915/xe report no fan speed as a percent",
    "sm_clock": "N/A: no GT frequency file (gt_act_freq_mhz / tile0/gt0/freq0/act_freq)",
}


def _vram_total(f: SysFiles, cdir: str) -> int | None:
    text = f.text(f"{cdir}/device/tile0/physical_vram_size_bytes")
    try:
        return None if text is None else int(text.strip(), 0)
    except ValueError:
        return None


def _temp(f: SysFiles, hw: str | None) -> int | None:
    if hw is None:
        return None
    for name in f.listdir(hw):
        if name.startswith("temp") and name.endswith("_input"):
            value = f.integer(f"{hw}/{name}")
            if value is not None:
                return value // 1000
    return None


def _clock(f: SysFiles, cdir: str, driver: str) -> int | None:
    if driver == "xe":
        return f.integer(f"{cdir}/device/tile0/gt0/freq0/act_freq")
    return f.integer(f"{cdir}/gt_act_freq_mhz")
