"""The DRM files both AMD and Intel readers use: the cards in /sys/class/drm and each process's
``/proc/PID/fdinfo`` (Documentation/gpu/drm-usage-stats.rst), read under the sysroot.

A client (one open DRM file, ``drm-client-id``) may sit behind several descriptors of one process or of
several (dup, fork): it is counted once, for the first PID seen. Engine time is a counter, so a client's
busy % is the change between two samples over the wall time between them.
"""

from __future__ import annotations

import pwd
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from gpumon.core.sysroot import SysFiles

_UNITS = {"": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}


@dataclass(frozen=True)
class Card:
    """A DRM card whose driver we read: ``/sys/class/drm/cardN/device``."""

    card: str  # "card0"
    driver: str  # "amdgpu" | "i915" | "xe"
    pci_id: str  # "1002:74A1"
    slot: str  # "0000:0c:00.0", what fdinfo's drm-pdev names


@dataclass
class Client:
    pid: int
    pdev: str
    driver: str
    memory: dict[str, int] = field(default_factory=dict)  # "drm-memory-vram", "drm-resident-local0"... -> bytes
    engines: dict[str, int] = field(default_factory=dict)  # "gfx" -> ns; xe: "cycles-rcs", "total-cycles-rcs"


def cards(files: SysFiles, drivers: tuple[str, ...]) -> list[Card]:
    """The cards driven by one of ``drivers``, in card-number order (render nodes and connectors left out)."""
    found = []
    names = [n for n in files.listdir("/sys/class/drm") if n.startswith("card") and n[4:].isdigit()]
    for name in sorted(names, key=lambda n: int(n[4:])):
        uevent = parse_keys(files.text(f"/sys/class/drm/{name}/device/uevent") or "", "=")
        if uevent.get("DRIVER") in drivers:
            found.append(Card(name, uevent["DRIVER"], uevent.get("PCI_ID", "?:?"), uevent.get("PCI_SLOT_NAME", "")))
    return found


def parse_keys(text: str, sep: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, found, value = line.partition(sep)
        if found:
            out[key.strip()] = value.strip()
    return out


def size(value: str) -> int | None:
    """``"1048576 KiB"`` -> bytes (a bare number is bytes)."""
    number, _, unit = value.partition(" ")
    try:
        return int(number) * _UNITS[unit.strip()]
    except (ValueError, KeyError):
        return None


def clients(files: SysFiles, drivers: tuple[str, ...]) -> list[Client]:
    """Every DRM client of ``drivers`` in /proc, once each (by driver, device and client id)."""
    seen: dict[tuple[str, str, str], Client] = {}
    for pid_name in files.listdir("/proc"):
        if not pid_name.isdigit():
            continue
        base = f"/proc/{pid_name}/fdinfo"
        for fd in files.listdir(base):
            target = files.readlink(f"/proc/{pid_name}/fd/{fd}")
            if target is not None and not target.startswith("/dev/dri/"):
                continue  # a file, socket or pipe: one readlink instead of reading its fdinfo
            text = files.text(f"{base}/{fd}")
            if not text or "drm-driver" not in text:
                continue
            keys = parse_keys(text, ":")
            driver = keys.get("drm-driver", "")
            if driver not in drivers:
                continue
            ident = (driver, keys.get("drm-pdev", ""), keys.get("drm-client-id", f"{pid_name}/{fd}"))
            if ident in seen:
                continue
            client = Client(int(pid_name), ident[1], driver)
            for key, value in keys.items():
                if key.startswith("drm-engine-") and not key.startswith("drm-engine-capacity-"):
                    ns = size(value.removesuffix(" ns"))
                    if ns is not None:
                        client.engines[key.removeprefix("drm-engine-")] = ns
                elif key.startswith(("drm-cycles-", "drm-total-cycles-")):
                    n = size(value)
                    if n is not None:
                        client.engines[key.removeprefix("drm-")] = n
                elif key.startswith(("drm-memory-", "drm-total-", "drm-resident-")):
                    n = size(value)
                    if n is not None:
                        client.memory[key] = n
            seen[ident] = client
    return list(seen.values())


def per_process(clients: Iterable[Client]) -> list[Client]:
    """One client per process and device: several open DRM files of one process summed."""
    merged: dict[tuple[int, str], Client] = {}
    for c in clients:
        into = merged.setdefault((c.pid, c.pdev), Client(c.pid, c.pdev, c.driver))
        for key, value in c.memory.items():
            into.memory[key] = into.memory.get(key, 0) + value
        for key, value in c.engines.items():
            into.engines[key] = into.engines.get(key, 0) + value
    return list(merged.values())


class EngineRates:
    """Busy % per client from counters between two samples (None on a client's first sample)."""

    def __init__(self) -> None:
        self._last: dict[tuple[int, str], tuple[float, dict[str, int]]] = {}

    def busy(self, client: Client, engines: tuple[str, ...], now: float | None = None) -> float | None:
        """The share of wall time ``engines`` (summed) ran this client's work, in percent (capped at 100)."""
        now = time.monotonic() if now is None else now
        key = (client.pid, client.pdev)
        last = self._last.get(key)
        self._last[key] = (now, dict(client.engines))
        if last is None or now <= last[0]:
            return None
        then, before = last
        if any(f"cycles-{e}" in client.engines for e in engines):  # xe: busy cycles over the GPU's total cycles
            cycles = [f"cycles-{e}" for e in engines]
            busy = sum(client.engines.get(c, 0) - before.get(c, 0) for c in cycles)
            total = max(client.engines.get(f"total-{c}", 0) - before.get(f"total-{c}", 0) for c in cycles)
            return None if total <= 0 else max(0.0, min(100.0, 100.0 * busy / total))
        ns = sum(client.engines.get(e, 0) - before.get(e, 0) for e in engines)
        return max(0.0, min(100.0, 100.0 * ns / ((now - then) * 1e9)))

    def forget_others(self, live: set[tuple[int, str]]) -> None:
        for key in set(self._last) - live:
            del self._last[key]


def hwmon(files: SysFiles, device: str) -> str | None:
    """The card's hwmon folder (``device/hwmon/hwmonN``), or None."""
    names = [n for n in files.listdir(f"{device}/hwmon") if n.startswith("hwmon")]
    return f"{device}/hwmon/{names[0]}" if names else None


def owner(files: SysFiles, pid: int) -> tuple[str | None, str | None]:
    """A process's user and command line, from its /proc files under the root (None where unreadable)."""
    raw = files.text(f"/proc/{pid}/cmdline")
    command = (" ".join(raw.split("\0")).strip() or None) if raw else None
    uid = parse_keys(files.text(f"/proc/{pid}/status") or "", ":").get("Uid", "").split()
    if not uid or not uid[0].isdigit():
        return None, command
    return user_name(files, int(uid[0])), command


def user_name(files: SysFiles, uid: int) -> str:
    """This machine's name for ``uid``; a recording's names come from its own etc/passwd, else the number."""
    if files.replayed:  # this machine's passwd would name another machine's users
        for line in (files.text("/etc/passwd") or "").splitlines():
            parts = line.split(":")
            if len(parts) > 2 and parts[2] == str(uid):
                return parts[0]
        return str(uid)
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
