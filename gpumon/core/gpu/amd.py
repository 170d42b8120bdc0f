"""AMD GPUs without ROCm, from the amdgpu driver's files (as nvtop reads them), under the sysroot.

Per card, ``/sys/class/drm/cardN/device/``: gpu_busy_percent, mem_busy_percent, mem_info_vram_*,
mem_info_gtt_*, pp_dpm_sclk/mclk (the starred line is the current clock), uevent (the PCI id names it),
ras/umc_err_count; its hwmon: temp*_input/label, power1_average or power1_input, power1_cap, fan. Per
process, ``/proc/PID/fdinfo`` (drm-memory-vram, drm-engine-gfx/compute: drm.py). ``amdsmi``, where its
library loads, adds the power that sysfs lacks (an MI300X's hwmon has none).
"""

from __future__ import annotations

import contextlib
import io
import time
from collections.abc import Callable
from typing import Any

from gpumon.core.gpu import drm
from gpumon.core.gpu.gpm import GPM_FIELDS
from gpumon.core.model import GpuDevice, GpuProcess, GpuSample
from gpumon.core.sysroot import SysFiles

#: PCI device id -> name, for cards without a product_name file (common ones; else "AMD GPU 0x74a1")
NAMES = {
    "74A1": "AMD Instinct MI300X",
    "74A5": "AMD Instinct MI325X",
    "74A0": "AMD Instinct MI300A",
    "740F": "AMD Instinct MI210",
    "740C": "AMD Instinct MI250X/MI250",
    "738C": "AMD Instinct MI100",
    "7448": "AMD Radeon PRO W7900",
    "744C": "AMD Radeon RX 7900 XTX",
    "7480": "AMD Radeon RX 7600",
    "73BF": "AMD Radeon RX 6900 XT",
    "73A1": "AMD Radeon PRO V620",
    "7550": "AMD Radeon RX 9070 XT",
}
ENGINES = ("gfx", "compute")  # a process's busy %: both, as nvtop counts them
NA = {
    "pstate": "N/A: P-states are NVIDIA's; amdgpu has DPM levels (the clocks)",
    "mig_mode": "N/A: MIG is NVIDIA's (amdgpu partitions are not read)",
} | dict.fromkeys(GPM_FIELDS, "N/A: SM activity is NVIDIA's GPM; amdgpu does not report it")


class AmdSource:
    name = "amdgpu"
    vendor = "amd"

    def __init__(self, files: SysFiles | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.files = files if files is not None else SysFiles()
        self.clock = clock  # engine counters and energy are rates over this clock's time
        self.cards = drm.cards(self.files, ("amdgpu",))
        self._rates = drm.EngineRates()
        self._smi = None if self.files.replayed else _amdsmi()  # a recording's power is in its files or nowhere

    def sample(self) -> GpuSample:
        clients = drm.clients(self.files, ("amdgpu",))
        devices = tuple(self._device(i, card, clients) for i, card in enumerate(self.cards))
        self._rates.forget_others({(c.pid, c.pdev) for c in clients})
        release = (self.files.text("/proc/sys/kernel/osrelease") or "").strip()
        return GpuSample(source=self.name, devices=devices, time=time.time(), driver=f"amdgpu (Linux {release})")

    def prime(self) -> None:
        """A first read of the engine counters, so that the next ``sample()`` has busy percents."""
        self.sample()

    def close(self) -> None:
        pass

    def _device(self, index: int, card: drm.Card, clients: list[drm.Client]) -> GpuDevice:
        f, base = self.files, f"/sys/class/drm/{card.card}/device"
        na = dict(NA)
        hw = drm.hwmon(f, base)
        temp = _temperature(f, hw)
        power = f.integer(f"{hw}/power1_average") if hw else None
        if power is None and hw:
            power = f.integer(f"{hw}/power1_input")  # newer kernels: the instant reading instead
        cap = f.integer(f"{hw}/power1_cap") if hw else None
        watts = None if power is None else power / 1e6
        if watts is None and self._smi is not None:
            watts = self._smi.power(card.slot)
        ue = drm.parse_keys(f.text(f"{base}/ras/umc_err_count") or "", ":").get("ue")
        values: dict[str, Any] = {
            "gpu_util": _float(f.integer(f"{base}/gpu_busy_percent")),
            "mem_util": _float(f.integer(f"{base}/mem_busy_percent")),
            "mem_used": f.integer(f"{base}/mem_info_vram_used"),
            "mem_total": f.integer(f"{base}/mem_info_vram_total"),
            "gtt_used": f.integer(f"{base}/mem_info_gtt_used"),
            "gtt_total": f.integer(f"{base}/mem_info_gtt_total"),
            "temperature": None if temp is None else temp // 1000,
            "power_draw": watts,
            "power_limit": None if cap is None else cap / 1e6,
            "fan": _fan(f, hw),
            "sm_clock": current_clock(f.text(f"{base}/pp_dpm_sclk")),
            "mem_clock": current_clock(f.text(f"{base}/pp_dpm_mclk")),
            "ecc_errors": int(ue) if ue is not None and ue.isdigit() else None,
        }
        for key, value in values.items():
            if value is None:
                na[key] = f"N/A: this amdgpu card does not report {_WHAT.get(key, key)}"
        procs = self._processes(index, card, clients)
        return GpuDevice(
            index=index,
            name=card_name(f, base, card.pci_id),
            uuid=_uuid(f, base, card.slot),
            vendor=self.vendor,
            processes=procs,
            na=na,
            **values,
        )

    def _processes(self, index: int, card: drm.Card, clients: list[drm.Client]) -> tuple[GpuProcess, ...]:
        out = []
        for c in drm.per_process(c for c in clients if c.pdev == card.slot):
            vram = next((c.memory[k] for k in _VRAM_KEYS if k in c.memory), None)
            user, command = drm.owner(self.files, c.pid)
            out.append(
                GpuProcess(
                    gpu_index=index,
                    pid=c.pid,
                    used_memory=vram,
                    sm_util=self._rates.busy(c, ENGINES, self.clock()),
                    kind=_kind(c),
                    user=user,
                    command=command,
                    simulated=self.files.replayed,  # a recording's PIDs are not this machine's: never signalled
                )
            )
        return tuple(sorted(out, key=lambda p: p.pid))


_VRAM_KEYS = ("drm-memory-vram", "drm-resident-vram", "drm-total-vram")
_WHAT = {
    "gpu_util": "its busy percent (gpu_busy_percent)",
    "mem_util": "memory busy percent (mem_busy_percent)",
    "mem_used": "VRAM (mem_info_vram_used)",
    "mem_total": "VRAM (mem_info_vram_total)",
    "gtt_used": "GTT (mem_info_gtt_used)",
    "gtt_total": "GTT (mem_info_gtt_total)",
    "temperature": "temperature (hwmon temp*_input)",
    "power_draw": "power (hwmon power1_average/power1_input; amdsmi not loaded)",
    "power_limit": "a power cap (hwmon power1_cap)",
    "fan": "a fan (hwmon pwm1/fan1_input): passively cooled or not exposed",
    "sm_clock": "a current shader clock (pp_dpm_sclk)",
    "mem_clock": "a current memory clock (pp_dpm_mclk)",
    "ecc_errors": "ECC errors (ras/umc_err_count)",
}


def _kind(c: drm.Client) -> str:
    """Graphics where only the gfx engine ran; else compute (a ROCm process's user-mode queues count no time)."""
    return "graphics" if c.engines.get("gfx") and not c.engines.get("compute") else "compute"


def current_clock(text: str | None) -> int | None:
    """The starred level of a pp_dpm_* table ("1: 1800Mhz *") in MHz; None without a star."""
    for line in (text or "").splitlines():
        if line.rstrip().endswith("*"):
            word = line.split(":", 1)[-1].split()[0].lower()
            try:
                return int(word.removesuffix("mhz"))
            except ValueError:
                return None
    return None


def card_name(f: SysFiles, base: str, pci_id: str) -> str:
    product = (f.text(f"{base}/product_name") or "").strip()
    if product:
        return product
    device = pci_id.partition(":")[2].upper()
    return NAMES.get(device, f"AMD GPU 0x{device.lower()}")


def _uuid(f: SysFiles, base: str, slot: str) -> str:
    unique = (f.text(f"{base}/unique_id") or "").strip()
    return f"AMD-{unique}" if unique else f"AMD-{slot}"


def _temperature(f: SysFiles, hw: str | None) -> int | None:
    """Millidegrees: the edge sensor (what nvtop shows), else the junction, else the first one."""
    if hw is None:
        return None
    labels = {}
    for name in f.listdir(hw):
        if name.startswith("temp") and name.endswith("_input"):
            sensor = name.removesuffix("_input")
            labels[(f.text(f"{hw}/{sensor}_label") or sensor).strip()] = sensor
    for want in ("edge", "junction", *sorted(labels)):
        if want in labels:
            value = f.integer(f"{hw}/{labels[want]}_input")
            if value is not None:
                return value
    return None


def _fan(f: SysFiles, hw: str | None) -> int | None:
    """Percent of the fan's range: pwm1 over pwm1_max (255 unless said), else fan1_input over fan1_max RPM."""
    if hw is None:
        return None
    pwm = f.integer(f"{hw}/pwm1")
    if pwm is not None:
        return round(100 * pwm / (f.integer(f"{hw}/pwm1_max") or 255))
    rpm, top = f.integer(f"{hw}/fan1_input"), f.integer(f"{hw}/fan1_max")
    return None if rpm is None or not top else round(100 * rpm / top)


def _float(value: int | None) -> float | None:
    return None if value is None else float(value)


class _AmdSmi:
    """What sysfs lacks, from ROCm's library where it loads (never required)."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib

    def power(self, slot: str) -> float | None:
        try:
            handle = self.lib.amdsmi_get_processor_handle_from_bdf(slot)
            info = self.lib.amdsmi_get_power_info(handle)
            value = info.get("average_socket_power", info.get("current_socket_power"))
            return float(value) if isinstance(value, int | float) else None
        except Exception:  # noqa: BLE001 - any library failure is simply "not reported"
            return None


def _amdsmi() -> _AmdSmi | None:
    # amdsmi 7.0.2 without ROCm prints two lines to stdout, then raises KeyError: neither may reach
    # `snapshot --json`'s output or the terminal the app draws on
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            import amdsmi  # type: ignore[import-not-found,unused-ignore]

            amdsmi.amdsmi_init()
    except Exception:  # noqa: BLE001 - without libamd_smi.so the package's own import raises KeyError
        return None
    return _AmdSmi(amdsmi)
