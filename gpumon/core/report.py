"""The one-shot text table of ``gpumon snapshot``."""

from __future__ import annotations

from gpumon.core.format import elide, gib_pair, num, percent, size
from gpumon.core.model import Snapshot
from gpumon.core.owners import owner_text


def snapshot_text(snap: Snapshot, width: int = 100) -> str:
    gpu, host = snap.gpu, snap.host
    tag = "  [SIMULATED]" if gpu.simulated else ""
    load = " ".join(f"{v:.2f}" for v in host.load) if host.load else "N/A"
    lines = [
        f"{host.hostname}  source {gpu.source}  driver {gpu.driver or 'N/A'}{tag}",
        f"host  CPU {host.cpu_percent:.0f}% of {len(host.per_cpu)} cores  load {load}"
        f"  mem {gib_pair(host.mem_used, host.mem_total)}  swap {gib_pair(host.swap_used, host.swap_total)}",
    ]
    if gpu.reason:
        lines.append(f"note: {gpu.reason}" if gpu.devices else f"no GPU shown: {gpu.reason}")
    for d in gpu.devices:
        if d.state != "ok":
            lines.append(f"[{d.index}] {d.name or 'N/A'}  {d.state.upper()}: {d.reason}")
            continue
        lines.append(
            f"[{d.index}] {elide(d.name, 28):28}  {num(d.temperature, '°C'):>5}  util {percent(d.gpu_util):>4}"
            f"  mem {gib_pair(d.mem_used, d.mem_total):>15} {percent(d.mem_percent):>4}"
            f"  power {num(d.power_draw)}/{num(d.power_limit, ' W')}"
        )
        if d.processes_reason:
            lines.append(f"      processes: N/A ({d.processes_reason})")
        elif d.processes:
            lines.append(f"      {'PID':>8}  {'USER':10} {'GPU MEM':>10} {'SM%':>4}  COMMAND")
            for p in sorted(d.processes, key=lambda p: -(p.used_memory or 0)):
                owner = owner_text(p)
                command = f"[{owner}] {p.command or 'N/A'}" if owner else p.command  # its pod, container or job
                lines.append(
                    f"      {p.pid:>8}  {elide(p.user, 10):10} {size(p.used_memory):>10} {num(p.sm_util):>4}"
                    f"  {elide(command, max(10, width - 44))}"
                )
    return "\n".join(lines)
