"""The fleet's hosts as serve's ``HostView``: each host's link, GPUs and runs, labelled by host.

The fleet (``core/fleet``: ssh links, Ray nodes, Slurm jobs) already streams each host's snapshot and its
``gpumon runs --json`` rows; this only picks from them the keys serve shows. A row's other keys (the run's
directory, its rendezvous, its error text) stay out, and a process's command line never comes in.
"""

from __future__ import annotations

from typing import Any

from gpumon.core.runs.record.store import LIVE_STATES
from gpumon.core.runs.record.values import metric_value
from gpumon.serve.ring import GpuRing
from gpumon.serve.view import PROCESS_KEYS, HostView

_ROW_NUMBERS = ("step", "samples_per_s", "memory_bytes", "progress", "eta_s", "step_time_s", "median_step_s")


def fleet_hosts(fleet: Any, ring: GpuRing) -> list[HostView]:
    """Every host of a ``FleetState`` but serve's own (``local``: it is the first host already)."""
    out = []
    for state in fleet.hosts:
        if getattr(state.host, "local", False):
            continue
        name = state.host.name
        snap = state.snapshot or {}
        devices = tuple(snap.get("devices") or ())
        if devices and state.link == "live" and snap.get("time") is not None:
            ring.add(name, list(devices), float(snap["time"]))
        pid_runs = {pid: row.get("id") for row in state.runs for pid in row.get("pids") or ()}
        processes = tuple(
            {**{k: p.get(k) for k in PROCESS_KEYS}, "run": pid_runs.get(p.get("pid")), "rank": None}
            for p in snap.get("processes") or ()
        )
        runs = tuple(_row(row, name) for row in state.runs if row.get("id"))
        out.append(
            HostView(
                name=name,
                link=state.link,
                reason=state.reason,
                devices=devices,
                processes=processes,
                runs=runs,
                queue=sum(1 for r in runs if r["state"] == "queued"),
                time=snap.get("time"),
                source=str(snap.get("source") or ""),
                gpu_reason=snap.get("reason"),
            )
        )
    return out


def _row(row: dict[str, Any], host: str) -> dict[str, Any]:
    state = str(row.get("status") or "")
    doc: dict[str, Any] = {
        "id": str(row["id"]),
        "name": "",
        "kind": str(row.get("kind") or ""),
        "state": state,
        "host": host,
        "live": state in LIVE_STATES,
        "created": row.get("started"),
        "loss": metric_value(row.get("loss")),
        "loss_source": row.get("loss_source"),
        "data_wait": row.get("data_wait_share"),
        "total_steps": row.get("total_steps"),
        "tokens_per_s": row.get("tokens_per_s"),
        "mfu": row.get("mfu"),
        "alerts": [str(a) for a in row.get("alerts") or ()],
        "warnings": [str(w) for w in row.get("warnings") or ()],
        "ranks": [
            {"rank": r.get("rank"), "pid": r.get("pid"), "step": r.get("step"), "host": r.get("host") or host}
            for r in row.get("ranks") or ()
            if isinstance(r, dict) and r.get("rank") is not None
        ],
        "loss_series": None,  # the fleet's rows carry no series: the host's own serve has them
        "headline": "",
        "headline_level": "none",
    }
    doc.update({key: metric_value(row.get(key)) for key in _ROW_NUMBERS})
    return doc
