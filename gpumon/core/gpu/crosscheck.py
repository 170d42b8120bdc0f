"""gpumon's GPU readings beside nvidia-smi's, field by field, within stated tolerances.

Used by the GPU test suite (``pytest -m gpu``) and ``bench/gpu_check.py``. The tolerances
say what can differ between two reads of the same counters a fraction of a second apart:
memory and identities must agree; utilisation, power and clocks move between the reads.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

MIB = 2**20

#: nvidia-smi --query-gpu fields, in order, and the snapshot key each is compared with.
GPU_FIELDS: tuple[tuple[str, str], ...] = (
    ("index", "index"),
    ("uuid", "uuid"),
    ("name", "name"),
    ("memory.total", "mem_total"),
    ("memory.used", "mem_used"),
    ("utilization.gpu", "gpu_util"),
    ("utilization.memory", "mem_util"),
    ("temperature.gpu", "temperature"),
    ("power.draw", "power_draw"),
    ("enforced.power.limit", "power_limit"),
    ("clocks.sm", "sm_clock"),
    ("clocks.mem", "mem_clock"),
    ("pstate", "pstate"),
    ("mig.mode.current", "mig_mode"),
    ("fan.speed", "fan"),
    ("ecc.errors.uncorrected.volatile.total", "ecc_errors"),
)
APP_FIELDS = ("pid", "gpu_uuid", "used_memory")
_MISSING = ("[N/A]", "[Not Supported]", "N/A", "[Unknown Error]", "")


@dataclass(frozen=True)
class Check:
    """One field of one GPU (or process): both readings, the tolerance, and whether they agree."""

    what: str  # "GPU 0 memory.used", "pid 1234 used_memory"
    ours: Any
    theirs: Any
    tolerance: str  # in words: "±64 MiB", "equal"
    ok: bool

    def line(self) -> str:
        mark = "ok " if self.ok else "MISMATCH"
        ours, theirs = _show(self.ours), _show(self.theirs)
        return f"{mark:8} {self.what:38} gpumon {ours:>22}  nvidia-smi {theirs:>22}  ({self.tolerance})"


def _show(value: Any) -> str:
    return "N/A" if value is None else f"{value:.1f}" if isinstance(value, float) else str(value)


def query_args(fields: Iterable[str], apps: bool = False) -> list[str]:
    flag = "--query-compute-apps" if apps else "--query-gpu"
    return ["nvidia-smi", f"{flag}={','.join(fields)}", "--format=csv,noheader,nounits"]


def parse_csv(text: str, fields: Iterable[str]) -> list[dict[str, Any]]:
    """Rows of ``--format=csv,noheader,nounits`` as dicts of typed values (None for N/A)."""
    keys = list(fields)
    rows = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("No running"):
            continue
        parts = [p.strip() for p in line.split(", ")]
        if len(parts) != len(keys):  # a name with ", " in it: only the name field may hold one
            extra = len(parts) - len(keys)
            at = keys.index("name") if "name" in keys else keys.index("process_name")
            parts[at : at + extra + 1] = [", ".join(parts[at : at + extra + 1])]
        rows.append({k: _value(k, v) for k, v in zip(keys, parts, strict=True)})
    return rows


def _value(key: str, raw: str) -> Any:
    if raw in _MISSING:
        return None
    if key == "pstate":
        return int(raw[1:]) if raw.startswith("P") and raw[1:].isdigit() else None
    if key.startswith("mig.mode"):
        return {"Enabled": True, "Disabled": False}.get(raw)
    if key in ("name", "uuid", "gpu_uuid", "process_name", "driver_version"):
        return raw
    try:
        number = float(raw)
    except ValueError:
        return raw
    return int(number) if number.is_integer() and "." not in raw else number


def run_smi(fields: Iterable[str], apps: bool = False) -> list[dict[str, Any]]:
    fields = list(fields)
    out = subprocess.run(query_args(fields, apps), capture_output=True, text=True, check=True, timeout=30).stdout
    return parse_csv(out, fields)


def _within(ours: float, theirs: float, absolute: float, relative: float = 0.0) -> bool:
    return abs(ours - theirs) <= max(absolute, relative * abs(theirs))


def compare_device(dev: Mapping[str, Any], row: Mapping[str, Any]) -> list[Check]:
    """A snapshot device (``gpumon snapshot --json``) against an nvidia-smi row of ``GPU_FIELDS``."""
    index = dev.get("index")
    checks: list[Check] = []

    def check(smi_key: str, ours: Any, theirs: Any, tolerance: str, ok: bool) -> None:
        checks.append(Check(f"GPU {index} {smi_key}", ours, theirs, tolerance, ok))

    for smi_key, key in GPU_FIELDS:
        if smi_key not in row:
            continue
        theirs, ours = row[smi_key], dev.get(key)
        if smi_key.startswith("memory."):
            ours = None if ours is None else ours / MIB  # nvidia-smi prints MiB
            ours_r = None if ours is None else round(ours, 1)
            absolute = 1.0 if smi_key == "memory.total" else 64.0
            ok = ours is not None and theirs is not None and _within(ours, theirs, absolute)
            check(smi_key, ours_r, theirs, f"±{absolute:g} MiB", ok)
            continue
        if theirs is None or ours is None:  # N/A on one side must be N/A on the other
            check(smi_key, ours, theirs, "both N/A", theirs is None and ours is None)
            continue
        if smi_key.startswith("utilization."):
            check(smi_key, ours, theirs, "±15 points", _within(ours, theirs, 15))
        elif smi_key == "temperature.gpu":
            check(smi_key, ours, theirs, "±2 °C", _within(ours, theirs, 2))
        elif smi_key == "power.draw":
            check(smi_key, ours, theirs, "±15 W or 10%", _within(ours, theirs, 15, 0.10))
        elif smi_key == "enforced.power.limit":
            check(smi_key, ours, theirs, "±1 W", _within(ours, theirs, 1))
        elif smi_key.startswith("clocks."):
            check(smi_key, ours, theirs, "±60 MHz or 10%", _within(ours, theirs, 60, 0.10))
        elif smi_key == "fan.speed":
            check(smi_key, ours, theirs, "±5 points", _within(ours, theirs, 5))
        else:
            check(smi_key, ours, theirs, "equal", ours == theirs)
    return checks


def compare_processes(
    ours: Iterable[Mapping[str, Any]], theirs: Iterable[Mapping[str, Any]], uuids: Mapping[str, int]
) -> list[Check]:
    """gpumon's compute processes against ``--query-compute-apps=pid,gpu_uuid,used_memory``.

    ``uuids`` maps a GPU's uuid to its index. Each (GPU, pid) of either side must be on the
    other, with its memory within 1 MiB (nvidia-smi rounds to MiB; N/A under MIG on both).
    """
    mine = {(p["gpu_index"], p["pid"]): p for p in ours if p.get("kind", "compute") == "compute"}
    smi = {(uuids.get(str(a["gpu_uuid"]), -1), a["pid"]): a for a in theirs}
    checks = []
    for gpu, pid in sorted(set(mine) | set(smi)):
        what = f"GPU {gpu} pid {pid}"
        if (gpu, pid) not in mine or (gpu, pid) not in smi:
            side = "gpumon" if (gpu, pid) in mine else "nvidia-smi"
            checks.append(Check(what, (gpu, pid) in mine, (gpu, pid) in smi, f"listed by {side} only", False))
            continue
        used = mine[gpu, pid].get("used_memory")
        ours_mib = None if used is None else round(used / MIB, 1)
        theirs_mib = smi[gpu, pid].get("used_memory")
        ok = (ours_mib is None and theirs_mib is None) or (
            ours_mib is not None and theirs_mib is not None and _within(ours_mib, theirs_mib, 1.0)
        )
        checks.append(Check(f"{what} used_memory", ours_mib, theirs_mib, "±1 MiB", ok))
    return checks
