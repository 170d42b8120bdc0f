"""Writes the recorded machines under tests/data/sys/ (run it again after changing it; its output is committed).

The files follow the kernel's formats: Documentation/gpu/amdgpu/ (gpu_busy_percent, mem_info_*, pp_dpm_*),
Documentation/gpu/drm-usage-stats.rst (fdinfo), the hwmon ABI (milli-degrees, micro-watts, micro-joules).
"""

from __future__ import annotations

import shutil
from pathlib import Path

HERE = Path(__file__).parent
GIB, MIB, KIB = 1024**3, 1024**2, 1024


def put(root: Path, path: str, text: str) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def uevent(driver: str, pci: str, slot: str, cls: str = "30000") -> str:
    v, d = pci.split(":")
    return (
        f"DRIVER={driver}\nPCI_CLASS={cls}\nPCI_ID={pci}\nPCI_SUBSYS_ID={pci}\nPCI_SLOT_NAME={slot}\n"
        f"MODALIAS=pci:v0000{v}d0000{d}sv0000{v}sd0000{d}bc{cls[:2]}sc00i00\n"
    )


def proc(root: Path, pid: int, uid: int, argv: list[str], fds: dict[int, str]) -> None:
    put(root, f"/proc/{pid}/cmdline", "\0".join(argv) + "\0")
    put(root, f"/proc/{pid}/status", f"Name:\t{Path(argv[0]).name}\nPid:\t{pid}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    for fd, text in fds.items():
        put(root, f"/proc/{pid}/fdinfo/{fd}", f"pos:\t0\nflags:\t02100002\nmnt_id:\t24\nino:\t{1000 + fd}\n{text}")


def amd_fdinfo(slot: str, client: int, vram: int | None, gtt: int, gfx: int, compute: int, new: bool = False) -> str:
    lines = [f"drm-driver:\tamdgpu\ndrm-client-id:\t{client}\ndrm-pdev:\t{slot}\npasid:\t{32768 + client}\n"]
    if new:  # drm_print_memory_stats (Linux 6.11+) without the legacy keys
        lines.append(f"drm-total-vram:\t{vram // KIB} KiB\ndrm-resident-vram:\t{vram // KIB} KiB\n")
    elif vram is not None:
        lines.append(f"drm-memory-vram:\t{vram // KIB} KiB\n")
    lines.append(f"drm-memory-gtt:\t{gtt // KIB} KiB\ndrm-memory-cpu:\t0 KiB\n")
    lines.append(f"drm-engine-gfx:\t{gfx} ns\ndrm-engine-compute:\t{compute} ns\ndrm-engine-dma:\t0 ns\n")
    return "".join(lines)


def amd_card(root: Path, card: str, pci: str, slot: str, **v: object) -> None:
    base = f"/sys/class/drm/{card}/device"
    put(root, f"{base}/uevent", uevent("amdgpu", pci, slot, str(v.get("cls", "30000"))))
    for name in ("gpu_busy_percent", "mem_busy_percent", "mem_info_vram_used", "mem_info_vram_total"):
        if name in v:
            put(root, f"{base}/{name}", f"{v[name]}\n")
    for name in ("mem_info_gtt_used", "mem_info_gtt_total", "unique_id", "product_name"):
        if name in v:
            put(root, f"{base}/{name}", f"{v[name]}\n")
    for name in ("pp_dpm_sclk", "pp_dpm_mclk"):
        if name in v:
            put(root, f"{base}/{name}", str(v[name]))
    if "ue" in v:
        put(root, f"{base}/ras/umc_err_count", f"ue: {v['ue']}\nce: 3\n")
    hw = f"{base}/hwmon/{v['hwmon']}"
    put(root, f"{hw}/name", "amdgpu\n")
    for n, (label, mc) in enumerate(v["temps"], start=1):  # type: ignore[arg-type]
        if mc is not None:
            put(root, f"{hw}/temp{n}_input", f"{mc}\n")
            put(root, f"{hw}/temp{n}_label", f"{label}\n")
    for name in ("power1_average", "power1_input", "power1_cap", "pwm1", "pwm1_max", "fan1_input", "fan1_max"):
        if name in v:
            put(root, f"{hw}/{name}", f"{v[name]}\n")


def clocks(levels: list[int], current: int) -> str:
    return "".join(f"{i}: {mhz}Mhz{' *' if i == current else ''}\n" for i, mhz in enumerate(levels))


def mi300x(root: Path) -> None:
    put(root, "/proc/sys/kernel/osrelease", "6.8.0-49-generic\n")
    put(root, "/sys/class/drm/card0/device/uevent", uevent("ast", "1A03:2000", "0000:02:00.0"))  # the BMC's VGA
    slots = ["05", "26", "46", "65", "85", "a6", "c6", "e5"]
    busy = [97, 95, 99, 0, 96, 98, 94, 0]
    for i, bus in enumerate(slots):
        slot = f"0000:{bus}:00.0"
        work = busy[i] > 0
        used = (150 + i) * GIB + 123 * MIB if work else 283 * MIB
        amd_card(
            root,
            f"card{i + 1}",
            "1002:74A1",
            slot,
            cls="120000",
            gpu_busy_percent=busy[i],
            mem_busy_percent=41 + i if work else 0,
            mem_info_vram_used=used,
            mem_info_vram_total=206141652992,
            mem_info_gtt_used=(12 + i) * MIB,
            mem_info_gtt_total=1056 * GIB,
            unique_id=f"{0x5A1B2C3D4E5F6000 + i:016x}",
            pp_dpm_sclk=clocks([500, 1420, 2100], 1) if work else "S: 132Mhz *\n0: 500Mhz\n1: 1420Mhz\n2: 2100Mhz\n",
            pp_dpm_mclk=clocks([900, 1300], 1),
            ue=1 if i == 6 else 0,
            hwmon=f"hwmon{2 + i}",
            temps=[("edge", None), ("junction", 71000 + 1000 * i if work else 38000), ("mem", 58000 + 500 * i)],
            power1_input=(640 + 7 * i) * 1_000_000 if work else 141_000_000,
            power1_cap=750_000_000,
        )
        if work:
            fds = {5: amd_fdinfo(slot, 40 + i, used - 256 * MIB, 8 * MIB, 0, 10**12 + i * 10**9)}
            if i == 0:
                fds[6] = fds[5]  # a dup'd descriptor: the same client, counted once
            cmd = ["/usr/bin/python3", "train.py", "--model", "llama-70b", f"--local-rank={i}"]
            proc(root, 41001 + i, 1000, cmd, fds)
    proc(root, 42000, 1000, ["/bin/bash"], {0: "", 1: ""})  # a shell: descriptors that are no GPU's


def radeon(root: Path) -> None:
    put(root, "/proc/sys/kernel/osrelease", "6.11.0-9-generic\n")
    w7900 = "0000:03:00.0"
    amd_card(
        root,
        "card1",
        "1002:7448",
        w7900,
        gpu_busy_percent=63,
        mem_busy_percent=22,
        mem_info_vram_used=21 * GIB + 512 * MIB,
        mem_info_vram_total=48 * GIB,
        mem_info_gtt_used=310 * MIB,
        mem_info_gtt_total=31 * GIB,
        pp_dpm_sclk=clocks([500, 1800, 2495], 1),
        pp_dpm_mclk=clocks([96, 456, 772, 1124], 3),
        hwmon="hwmon4",
        temps=[("edge", 61000), ("junction", 78000), ("mem", 70000)],
        power1_average=212_000_000,
        power1_cap=241_000_000,
        pwm1=97,
        pwm1_max=255,
        fan1_input=1240,
        fan1_max=3300,
    )
    igpu = "0000:7a:00.0"
    amd_card(
        root,
        "card2",
        "1002:164E",
        igpu,
        gpu_busy_percent=3,
        mem_info_vram_used=180 * MIB,
        mem_info_vram_total=512 * MIB,
        pp_dpm_sclk=clocks([600, 2200], 0),
        hwmon="hwmon5",
        temps=[("edge", 45000)],
        power1_input=9_000_000,
    )
    proc(
        root,
        3300,
        1000,
        ["/usr/bin/python3", "-m", "torch.distributed.run", "finetune.py"],
        {7: amd_fdinfo(w7900, 12, 20 * GIB, 64 * MIB, 0, 5 * 10**11, new=True)},
    )
    xorg_fds = {9: amd_fdinfo(w7900, 3, 300 * MIB, 16 * MIB, 8 * 10**10, 0)}
    xorg_fds[10] = amd_fdinfo(igpu, 4, 96 * MIB, 8 * MIB, 3 * 10**9, 0)
    proc(root, 1850, 0, ["/usr/lib/xorg/Xorg", "vt2", "-displayfd", "3"], xorg_fds)


def intel(root: Path) -> None:
    put(root, "/proc/sys/kernel/osrelease", "6.12.0-1-amd64\n")
    igpu, arc = "0000:00:02.0", "0000:03:00.0"
    put(root, "/sys/class/drm/card0/device/uevent", uevent("i915", "8086:A780", igpu))
    put(root, "/sys/class/drm/card0/gt_act_freq_mhz", "350\n")
    put(root, "/sys/class/drm/card0/gt_cur_freq_mhz", "350\n")
    put(root, "/sys/class/drm/card1/device/uevent", uevent("xe", "8086:E20B", arc))
    put(root, "/sys/class/drm/card1/device/tile0/physical_vram_size_bytes", f"{12 * GIB}\n")
    put(root, "/sys/class/drm/card1/device/tile0/gt0/freq0/act_freq", "2850\n")
    hw = "/sys/class/drm/card1/device/hwmon/hwmon6"
    put(root, f"{hw}/name", "xe\n")
    put(root, f"{hw}/power1_max", "190000000\n")
    put(root, f"{hw}/energy1_input", "8123456789\n")
    put(root, f"{hw}/temp2_input", "66000\n")
    xe = (
        f"drm-driver:\txe\ndrm-client-id:\t21\ndrm-pdev:\t{arc}\ndrm-total-system:\t0\n"
        "drm-total-gtt:\t40960 KiB\ndrm-resident-gtt:\t40960 KiB\n"
        f"drm-total-vram0:\t{9 * GIB // KIB} KiB\ndrm-resident-vram0:\t{9 * GIB // KIB} KiB\n"
        "drm-cycles-rcs:\t28257900\ndrm-total-cycles-rcs:\t7655183225\n"
        "drm-cycles-ccs:\t7000000000\ndrm-total-cycles-ccs:\t7655183225\n"
        "drm-cycles-bcs:\t0\ndrm-total-cycles-bcs:\t7655183225\n"
    )
    proc(root, 5120, 1000, ["/usr/bin/python3", "train_xpu.py"], {4: xe})
    i915 = (
        f"drm-driver:\ti915\ndrm-client-id:\t7\ndrm-pdev:\t{igpu}\n"
        "drm-total-system0:\t120340 KiB\ndrm-resident-system0:\t120340 KiB\n"
        "drm-engine-render:\t9250000000 ns\ndrm-engine-copy:\t0 ns\ndrm-engine-video:\t0 ns\n"
        "drm-engine-capacity-video:\t2\ndrm-engine-video-enhance:\t0 ns\n"
    )
    proc(root, 1700, 1000, ["/usr/bin/gnome-shell"], {12: i915})


def nvidia_amd(root: Path) -> None:
    put(root, "/proc/sys/kernel/osrelease", "6.8.0-49-generic\n")
    for i, bus in enumerate(("c1", "c2")):
        slot = f"0000:{bus}:00.0"
        amd_card(
            root,
            f"card{i}",
            "1002:740F",
            slot,
            cls="38000",
            gpu_busy_percent=88 - 88 * i,
            mem_busy_percent=30 - 30 * i,
            mem_info_vram_used=(40 - 39 * i) * GIB,
            mem_info_vram_total=64 * GIB,
            mem_info_gtt_used=20 * MIB,
            mem_info_gtt_total=252 * GIB,
            unique_id=f"{0x7A00000000000000 + i:016x}",
            pp_dpm_sclk=clocks([500, 1700], 1 - i),
            pp_dpm_mclk=clocks([1600], 0),
            ue=0,
            hwmon=f"hwmon{i + 1}",
            temps=[("edge", 52000 - 10000 * i), ("junction", 64000 - 12000 * i), ("mem", 60000 - 8000 * i)],
            power1_average=(245 - 200 * i) * 1_000_000,
            power1_cap=300_000_000,
        )
    proc(
        root,
        7777,
        1001,
        ["/usr/bin/python3", "infer.py"],
        {3: amd_fdinfo("0000:c1:00.0", 9, 39 * GIB, 2 * MIB, 0, 7 * 10**11)},
    )


PASSWD = "root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/bash\n"


def main() -> None:
    for name, write in (("mi300x", mi300x), ("radeon", radeon), ("intel", intel), ("nvidia-amd", nvidia_amd)):
        shutil.rmtree(HERE / name, ignore_errors=True)
        write(HERE / name)
        if name != "nvidia-amd":  # there: a user this recording does not name (shown by number)
            put(HERE / name, "/etc/passwd", PASSWD)


if __name__ == "__main__":
    main()
