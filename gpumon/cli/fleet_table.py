"""What ``gpumon fleet`` prints: the fleet's JSON document, or a table of hosts and one of GPUs, and the total.

Shared by the ssh hosts' ``gpumon fleet`` and ``--slurm``'s (which adds the cluster's summary).
"""

from __future__ import annotations

import json
import time
from typing import Any

from gpumon import __version__
from gpumon.cli.common import print_table
from gpumon.core import format as fmt


def fleet_doc(state: Any) -> dict[str, Any]:
    idle, total = state.totals()
    hosts = []
    for h in state.hosts:
        where = {"name": h.host.name, "address": h.host.address, "user": h.host.user, "port": h.host.port}
        hosts.append(
            {
                **where,
                **{key: getattr(h, key) for key in ("link", "reason", "detail", "since", "latency_ms", "version")},
                **{key: getattr(h, key) for key in ("retry_at", "snapshot", "runs_reason", "runs_at")},
                "runs": list(h.runs),
            }
        )
    return {"schema": 1, "version": __version__, "time": state.time, "idle_gpus": idle, "gpus": total, "hosts": hosts}


def print_fleet(state: Any, as_json: bool = False, watch: bool = False) -> None:
    if as_json:
        doc = fleet_doc(state)
        print(json.dumps(doc, separators=(",", ":")) if watch else json.dumps(doc, indent=1), flush=True)
        return
    rows: list[tuple[str, ...]] = [("HOST", "LINK", "LATENCY", "GPUS", "IDLE", "HOST CPU", "NOTE")]
    gpu_rows: list[tuple[str, ...]] = [("HOST", "GPU", "NAME", "UTIL", "MEMORY", "TEMP", "POWER", "PIDS")]
    for h in state.hosts:
        busy = {p.get("gpu_index") for p in (h.snapshot or {}).get("processes", [])}
        idle = sum(1 for d in h.gpus if (d.get("gpu_util") or 0) < 5 and d.get("index") not in busy)
        host_doc = (h.snapshot or {}).get("host") or {}
        note = h.reason or ((h.snapshot or {}).get("reason") or "")
        if h.link == "stale" and h.since:
            note = f"no sample since {time.strftime('%H:%M:%S', time.localtime(h.since))}"
        latency = "" if h.latency_ms is None else f"{h.latency_ms:.0f} ms"
        cpu = "" if host_doc.get("cpu_percent") is None else f"{host_doc['cpu_percent']:.0f}%"
        gpus = (str(len(h.gpus)), str(idle)) if h.snapshot is not None else ("", "")
        rows.append((h.host.name, h.link, latency, *gpus, cpu, note))
        pids: dict[int, int] = {}
        for proc in (h.snapshot or {}).get("processes", []):
            pids[proc.get("gpu_index")] = pids.get(proc.get("gpu_index"), 0) + 1
        for d in h.gpus:
            gpu_rows.append(_gpu_row(h.host.name, d, pids.get(d.get("index"), 0)))
    print_table(rows)
    if len(gpu_rows) > 1:
        print()
        print_table(gpu_rows)
    idle, total = state.totals()
    print(f"\n{idle} of {total} GPUs idle" + ("\n" if watch else ""), flush=True)


def _gpu_row(host: str, d: dict[str, Any], pids: int) -> tuple[str, ...]:
    def num(value: Any, unit: str) -> str:
        return "N/A" if value is None else f"{value:.0f}{unit}"

    memory = "N/A"
    if d.get("mem_used") is not None and d.get("mem_total"):
        memory = f"{fmt.size(d['mem_used'])} / {fmt.size(d['mem_total'])}"
    name = str(d.get("name") or "N/A") + ("" if d.get("state", "ok") == "ok" else f" ({d.get('state')})")
    return (
        host,
        str(d.get("index")),
        name,
        num(d.get("gpu_util"), "%"),
        memory,
        num(d.get("temperature"), " C"),
        num(d.get("power_draw"), " W"),
        str(pids),
    )
