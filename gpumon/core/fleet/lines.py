"""What the Fleet view shows, as plain values: a line per GPU, a header per host, the fleet's total.

Pure functions of a ``HostState``/``FleetState`` (no Textual), so the view compares these frozen
values with the last ones and repaints only a host whose values changed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpumon.core.fleet.model import FleetState, HostState, gpu_idle
from gpumon.core.visible import visible

_VENDOR = ("NVIDIA", "GeForce", "Tesla", "Quadro", "Simulated", "AMD", "Instinct", "Radeon", "Intel", "Data", "Center")


@dataclass(frozen=True, slots=True)
class GpuLine:
    index: int
    name: str  # "H100 80GB", "RTX 4090"
    state: str  # "ok" | "lost" | "error"
    util: float | None
    mem_used: int | None
    mem_total: int | None
    temperature: int | None
    power: float | None
    idle: bool
    user: str | None = None  # of the process using most memory on it
    command: str | None = None  # that process's program, short
    processes: int = 0
    run: str | None = None  # the gpumon run of one of its processes

    @property
    def mem_percent(self) -> float | None:
        return 100.0 * self.mem_used / self.mem_total if self.mem_used is not None and self.mem_total else None


@dataclass(frozen=True, slots=True)
class HostLines:
    name: str
    link: str  # connecting | live | stale | down
    words: str  # "live 23 ms", "stale since 14:02:11", "authentication refused"
    gpus: tuple[GpuLine, ...]
    note: str | None = None  # why no GPU is shown (no snapshot yet, or the snapshot's reason)
    simulated: bool = False

    @property
    def idle(self) -> int:
        return sum(1 for g in self.gpus if g.idle)

    @property
    def busy(self) -> int:
        return len(self.gpus) - self.idle

    def memory(self) -> tuple[int, int]:
        """(used, total) bytes over its GPUs that report both."""
        known = [g for g in self.gpus if g.mem_used is not None and g.mem_total is not None]
        return sum(g.mem_used or 0 for g in known), sum(g.mem_total or 0 for g in known)


def short_gpu_name(name: str | None) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'H100 80GB'; 'NVIDIA GeForce RTX 4090' -> 'RTX 4090'; 'AMD Instinct MI300X' ->
    'MI300X'; 'Intel Data Center GPU Flex 170' -> 'GPU Flex'."""
    words = [w for w in (name or "").split() if w not in _VENDOR]
    return " ".join(words[:2]) or "N/A"


def short_command(command: str | None) -> str | None:
    """'python -m torch.distributed.run --nproc…' -> 'torch.distributed.run'; 'python train.py -x' -> 'train.py'."""
    words = (command or "").split()
    if not words:
        return None
    program = os.path.basename(words[0])
    if program.startswith("python") and len(words) > 1:
        rest = [w for w in words[1:] if not w.startswith("-") or w == "-m"]
        if rest[:1] == ["-m"] and len(rest) > 1:
            return rest[1]
        if rest and rest[0] != "-m":
            return os.path.basename(rest[0])
    return program


def run_pids(rows: tuple[dict[str, Any], ...]) -> dict[int, str]:
    """PID -> run id from ``gpumon runs --json`` rows that carry ``pid`` or ``pids`` (older ones carry neither)."""
    out: dict[int, str] = {}
    for row in rows:
        run_id = row.get("id")
        if not isinstance(run_id, str):
            continue
        pids = [row.get("pid"), *(row.get("pids") or ())]
        out.update({pid: run_id for pid in pids if isinstance(pid, int)})
    return out


def link_words(state: HostState) -> str:
    """The link in words: 'connecting', 'live 23 ms', 'stale since 14:02:11', or the reason it is down."""
    if state.link == "live":
        return f"live {state.latency_ms:.0f} ms" if state.latency_ms is not None else "live"
    if state.link == "stale":
        since = f"stale since {time.strftime('%H:%M:%S', time.localtime(state.since))}" if state.since else "stale"
        return f"{since} · {state.reason}" if state.reason else since
    if state.link == "down":
        return state.reason or "down"
    return f"connecting · last: {state.reason}" if state.reason else "connecting"


def host_lines(state: HostState, pids: Mapping[int, str] | None = None) -> HostLines:
    """The host's header and GPU lines; ``pids`` adds PID -> run id pairs known here (the local machine's runs)."""
    runs = {**run_pids(state.runs), **(pids or {})}
    doc = state.snapshot or {}
    by_gpu: dict[Any, list[dict[str, Any]]] = {}
    for proc in doc.get("processes") or ():
        by_gpu.setdefault(proc.get("gpu_index"), []).append(proc)
    gpus = tuple(_gpu_line(dev, by_gpu.get(dev.get("index"), []), runs) for dev in doc.get("devices") or ())
    note = None
    if not state.snapshot:
        note = "waiting for the first snapshot…" if state.link in ("connecting", "live") else "no snapshot"
    elif not gpus:
        note = f"no GPU: {doc.get('reason') or 'no GPU source answered'}"
    # another host's words (its reason, its GPUs' names, its users and commands): shown, never obeyed (visible.py)
    words, note = visible(link_words(state)), visible(note) if note else note
    return HostLines(visible(state.host.name), state.link, words, gpus, note, bool(doc.get("simulated")))


def _gpu_line(dev: dict[str, Any], procs: list[dict[str, Any]], runs: Mapping[int, str]) -> GpuLine:
    top = max(procs, key=lambda p: p.get("used_memory") or 0, default=None)
    run = next((runs[p["pid"]] for p in sorted(procs, key=lambda p: p is not top) if p.get("pid") in runs), None)
    return GpuLine(
        index=int(dev.get("index", 0)),
        name=visible(short_gpu_name(dev.get("name"))),
        state=visible(str(dev.get("state") or "ok")),
        util=dev.get("gpu_util"),
        mem_used=dev.get("mem_used"),
        mem_total=dev.get("mem_total"),
        temperature=dev.get("temperature"),
        power=dev.get("power_draw"),
        idle=gpu_idle(dev, bool(procs)),
        user=visible(str(top["user"])) if top and top.get("user") else None,
        command=visible(short_command(top.get("command")) or "") or None if top else None,
        processes=len(procs),
        run=visible(run) if run else run,
    )


def fleet_line(state: FleetState) -> str:
    """'7 of 24 GPUs idle · 5 hosts (4 live)'."""
    idle, total = state.totals()
    live = sum(1 for h in state.hosts if h.link == "live")
    hosts = len(state.hosts)
    return f"{idle} of {total} GPUs idle · {hosts} host{'s' if hosts != 1 else ''} ({live} live)"
