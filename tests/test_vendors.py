"""AMD and Intel GPUs read from recorded kernel files (tests/data/sys/): every number against its file."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpumon.core.gpu import open_gpu_source
from gpumon.core.gpu.amd import AmdSource
from gpumon.core.gpu.intel import IntelSource
from gpumon.core.model import GpuDevice
from gpumon.core.sysroot import SysFiles
from tests.vendor_trees import AMD_TREES, TREES, amd_cards, fdinfo_clients, kib, number, slot, starred_mhz

#: the fields every reader gives or explains (na) — never a silent None, never 0 for unknown
FIELDS = ("gpu_util", "mem_util", "mem_used", "mem_total", "temperature", "power_draw", "power_limit", "fan")
FIELDS += ("sm_clock", "mem_clock", "pstate", "ecc_errors", "mig_mode")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def amd(root: Path, clock: Clock | None = None) -> AmdSource:
    return AmdSource(SysFiles(root), **({"clock": clock} if clock else {}))


@pytest.mark.parametrize("tree", AMD_TREES)
def test_every_amd_number_is_the_one_in_its_file(tree: str) -> None:
    root = TREES / tree
    devices = amd(root).sample().devices
    cards = amd_cards(root)
    assert len(devices) == len(cards) and len(cards) >= 2
    for dev, card in zip(devices, cards, strict=True):
        hw = next((card / "hwmon").iterdir())
        assert dev.vendor == "amd"
        assert dev.gpu_util == number(card / "gpu_busy_percent")
        assert dev.mem_util == number(card / "mem_busy_percent")
        assert dev.mem_used == number(card / "mem_info_vram_used")
        assert dev.mem_total == number(card / "mem_info_vram_total")
        assert dev.gtt_used == number(card / "mem_info_gtt_used")
        assert dev.gtt_total == number(card / "mem_info_gtt_total")
        assert dev.sm_clock == starred_mhz(card / "pp_dpm_sclk")
        assert dev.mem_clock == starred_mhz(card / "pp_dpm_mclk")
        labels = {(hw / f"temp{n}_label").read_text().strip(): n for n in (1, 2, 3) if (hw / f"temp{n}_label").exists()}
        sensor = labels.get("edge", labels.get("junction"))
        assert dev.temperature == number(hw / f"temp{sensor}_input") // 1000  # type: ignore[operator]
        micro = number(hw / "power1_average") or number(hw / "power1_input")
        assert dev.power_draw == (None if micro is None else micro / 1e6)
        cap = number(hw / "power1_cap")
        assert dev.power_limit == (None if cap is None else cap / 1e6)
        pwm = number(hw / "pwm1")
        assert dev.fan == (None if pwm is None else round(100 * pwm / number(hw / "pwm1_max")))  # type: ignore[operator]
        ras = (card / "ras/umc_err_count").read_text() if (card / "ras/umc_err_count").exists() else None
        assert dev.ecc_errors == (None if ras is None else int(ras.split("ue:")[1].split()[0]))


def test_names_come_from_the_pci_id_and_an_unknown_id_is_named_by_its_number() -> None:
    assert {d.name for d in amd(TREES / "mi300x").sample().devices} == {"AMD Instinct MI300X"}
    names = [d.name for d in amd(TREES / "radeon").sample().devices]
    assert names == ["AMD Radeon PRO W7900", "AMD GPU 0x164e"]


@pytest.mark.parametrize("tree", AMD_TREES)
def test_each_process_has_the_vram_its_fdinfo_says_on_the_card_its_pdev_names(tree: str) -> None:
    root = TREES / tree
    slots = [slot(c) for c in amd_cards(root)]
    expected = {}
    for (pid, pdev), keys in fdinfo_clients(root, "amdgpu").items():
        vram = keys.get("drm-memory-vram", keys.get("drm-resident-vram"))
        expected[(slots.index(pdev), pid)] = kib(vram) if vram else None
    got = {(p.gpu_index, p.pid): p.used_memory for d in amd(root).sample().devices for p in d.processes}
    assert got == expected and expected
    assert 42000 not in {pid for _, pid in got}  # mi300x's shell: descriptors, none a GPU's


def test_a_process_busy_percent_is_its_engine_time_between_two_samples(tmp_path: Path) -> None:
    root = tmp_path / "radeon"
    shutil.copytree(TREES / "radeon", root)
    clock = Clock()
    source = amd(root, clock)
    first = source.sample()
    assert all(p.sm_util is None for d in first.devices for p in d.processes)  # one reading is no rate
    info = root / "proc/3300/fdinfo/7"
    text = info.read_text()
    compute = next(x for x in text.splitlines() if x.startswith("drm-engine-compute:"))
    ns = int(compute.split()[1])
    info.write_text(text.replace(compute, f"drm-engine-compute:\t{ns + 1_500_000_000} ns"))
    clock.now += 2.0
    procs = {p.pid: p for d in source.sample().devices for p in d.processes if d.index == 0}
    assert procs[3300].sm_util == pytest.approx(75.0)  # 1.5 s of compute in 2 s
    assert procs[1850].sm_util == 0.0 and procs[3300].kind == "compute" and procs[1850].kind == "graphics"


def test_a_field_the_driver_lacks_says_why_and_is_never_zero() -> None:
    for tree in ("mi300x", "radeon", "intel", "nvidia-amd"):
        root = TREES / tree
        for dev in (*amd(root).sample().devices, *IntelSource(SysFiles(root)).sample().devices):
            for name in FIELDS:
                if getattr(dev, name) is None:
                    assert dev.na.get(name, "").startswith("N/A: "), (tree, dev.name, name)
    mi = amd(TREES / "mi300x").sample().devices[0]
    assert mi.fan is None and "fan" in mi.na["fan"]  # passively cooled: no fan file, not 0%
    igpu = amd(TREES / "radeon").sample().devices[1]
    assert igpu.mem_util is None and "mem_busy_percent" in igpu.na["mem_util"]
    assert igpu.power_limit is None and "power1_cap" in igpu.na["power_limit"]


def test_intel_memory_clock_and_engine_use_from_fdinfo_and_sysfs(tmp_path: Path) -> None:
    root = tmp_path / "intel"
    shutil.copytree(TREES / "intel", root)
    clock = Clock()
    source = IntelSource(SysFiles(root), clock=clock)
    igpu, arc = source.sample().devices
    assert (igpu.name, arc.name) == ("Intel UHD Graphics 770", "Intel Arc B580")
    assert igpu.vendor == arc.vendor == "intel"
    assert igpu.sm_clock == number(root / "sys/class/drm/card0/gt_act_freq_mhz")
    assert arc.sm_clock == number(root / "sys/class/drm/card1/device/tile0/gt0/freq0/act_freq")
    assert arc.mem_total == number(root / "sys/class/drm/card1/device/tile0/physical_vram_size_bytes")
    xe = fdinfo_clients(root, "xe")[(5120, "0000:03:00.0")]
    assert arc.processes[0].used_memory == kib(xe["drm-resident-vram0"]) == arc.mem_used
    assert arc.power_limit == number(root / "sys/class/drm/card1/device/hwmon/hwmon6/power1_max") / 1e6  # type: ignore[operator]
    assert arc.temperature == number(root / "sys/class/drm/card1/device/hwmon/hwmon6/temp2_input") // 1000  # type: ignore[operator]
    assert igpu.mem_total is None and "i915" in igpu.na["mem_total"]  # i915 has no size file: said, not 0
    # between two samples: xe's busy cycles over total cycles, i915's render ns over wall time, energy over time
    fd, energy = root / "proc/5120/fdinfo/4", root / "sys/class/drm/card1/device/hwmon/hwmon6/energy1_input"
    lines = dict(x.split(":\t") for x in fd.read_text().splitlines())
    for engine, add in (("rcs", 1_000_000_000), ("ccs", 2_500_000_000)):
        lines[f"drm-cycles-{engine}"] = str(int(lines[f"drm-cycles-{engine}"]) + add)
    for engine in ("rcs", "ccs", "bcs"):
        lines[f"drm-total-cycles-{engine}"] = str(int(lines[f"drm-total-cycles-{engine}"]) + 7_000_000_000)
    fd.write_text("".join(f"{k}:\t{v}\n" for k, v in lines.items()))
    energy.write_text(f"{number(energy) + 300_000_000}\n")  # type: ignore[operator]
    i915 = root / "proc/1700/fdinfo/12"
    i915.write_text(i915.read_text().replace("9250000000 ns", "9750000000 ns"))
    clock.now += 2.0
    igpu, arc = source.sample().devices
    assert arc.processes[0].sm_util == pytest.approx(50.0) == arc.gpu_util  # 3.5e9 of 7e9 cycles
    assert arc.power_draw == pytest.approx(150.0)  # 300 J in 2 s
    assert igpu.processes[0].sm_util == pytest.approx(25.0) == igpu.gpu_util  # 0.5 s of render in 2 s


def by_vendor(devices: tuple[GpuDevice, ...]) -> list[tuple[int, str]]:
    return [(d.index, d.vendor) for d in devices]


def test_open_gpu_source_picks_every_vendor_present(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUMON_SYS_ROOT", str(TREES / "intel"))
    source = open_gpu_source()
    assert source.name == "intel" and by_vendor(source.sample().devices) == [(0, "intel"), (1, "intel")]
    monkeypatch.setenv("GPUMON_SYS_ROOT", str(TREES / "nvidia-amd"))
    mixed = open_gpu_source(2)  # simulated NVML beside the recorded AMD tree
    sample = mixed.sample()
    assert sample.source == "simulated+amdgpu" and sample.simulated
    assert by_vendor(sample.devices) == [(0, "nvidia"), (1, "nvidia"), (2, "amd"), (3, "amd")]
    on_amd = {p.pid: p.gpu_index for p in sample.devices[2].processes}
    assert on_amd == {7777: 2}
    assert all(p.simulated for d in sample.devices for p in d.processes)  # a recording's PIDs are never signalled


def test_rocm_torch_finds_the_amd_cards_and_mfu_knows_their_peaks(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpumon.core.gpu import visible_gpu_count
    from gpumon.core.gpu.peaks import dense_peaks

    monkeypatch.setenv("GPUMON_SYS_ROOT", str(TREES / "mi300x"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert visible_gpu_count() == 8  # the launch form's DDP ranks on a ROCm machine (no NVML)
    peaks = dense_peaks("AMD Instinct MI300X")  # torch.cuda.get_device_name() on ROCm
    assert peaks is not None and peaks["bf16"] == 1307.4e12 and "tf32" not in peaks


# amdsmi 7.0.2 from PyPI on a machine without ROCm (measured here): two lines on stdout, then KeyError
AMDSMI_WITHOUT_ROCM = """
print("/opt/rocm/lib/libamd_smi.so: cannot open shared object file: No such file or directory")
print("Unable to find libamd_smi.so library try installing amd-smi-lib from your package manager")
raise KeyError("libamd_smi.so")
"""


def test_amdsmi_without_rocm_is_passed_over_silently(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    from gpumon.core.gpu.amd import _amdsmi

    (tmp_path / "amdsmi.py").write_text(AMDSMI_WITHOUT_ROCM)
    sys.path.insert(0, str(tmp_path))
    try:
        assert _amdsmi() is None
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("amdsmi", None)
    assert capsys.readouterr().out == ""  # `snapshot --json` stays JSON
