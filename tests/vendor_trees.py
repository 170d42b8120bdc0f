"""The recorded machines under tests/data/sys/, read back by the tests independently of gpumon's readers:
each expected number comes straight from the file a reader should have used."""

from __future__ import annotations

import os
from pathlib import Path

TREES = Path(__file__).parent / "data" / "sys"
AMD_TREES = ("mi300x", "radeon", "nvidia-amd")


def read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def number(path: Path) -> int | None:
    text = read(path)
    return None if text is None else int(text.split()[0])


def amd_cards(root: Path) -> list[Path]:
    """The amdgpu cards' device folders, in card-number order."""
    drm = root / "sys/class/drm"
    found = []
    for card in sorted(drm.iterdir(), key=lambda p: int(p.name[4:])):
        if "DRIVER=amdgpu\n" in (read(card / "device/uevent") or ""):
            found.append(card / "device")
    return found


def slot(device: Path) -> str:
    line = next(x for x in (read(device / "uevent") or "").splitlines() if x.startswith("PCI_SLOT_NAME="))
    return line.split("=", 1)[1]


def starred_mhz(path: Path) -> int | None:
    for line in (read(path) or "").splitlines():
        if line.endswith(" *"):
            return int(line.split(":")[1].strip().split("Mhz")[0])
    return None


def fdinfo_clients(root: Path, driver: str) -> dict[tuple[int, str], dict[str, str]]:
    """(pid, drm-pdev) -> the fdinfo's keys, one client id once (a dup'd descriptor is the same client)."""
    out: dict[tuple[int, str], dict[str, str]] = {}
    seen: set[tuple[str, str]] = set()
    for pid in sorted(os.listdir(root / "proc")):
        if not pid.isdigit():
            continue
        for fd in sorted((root / "proc" / pid / "fdinfo").iterdir()):
            keys = dict(
                (a.strip(), b.strip()) for a, _, b in (x.partition(":") for x in fd.read_text().splitlines()) if _
            )
            if keys.get("drm-driver") != driver or (keys["drm-pdev"], keys["drm-client-id"]) in seen:
                continue
            seen.add((keys["drm-pdev"], keys["drm-client-id"]))
            assert (int(pid), keys["drm-pdev"]) not in out, "a tree with two clients of one process on one card"
            out[(int(pid), keys["drm-pdev"])] = keys
    return out


def kib(value: str) -> int:
    n, unit = value.split()
    assert unit == "KiB"
    return int(n) * 1024
