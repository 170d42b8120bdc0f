"""Where a step's time goes (issue 37): GPU busy, waiting for data, host, sync, as shares of the rank's time.

Only from what the telemetry measures already, so a share is a measurement or None with the reason:

- ``data``: the DataLoader's wait per second of training (feeding.py: ``wait`` in the step events), over the
  recent window. Without a DataLoader it is not measured (None).
- ``gpu_busy`` (CUDA): the supervisor's NVML utilisation of the rank's GPU (``gpu_use``: the share of time any
  kernel ran, the mean of its last looks). It is an upper bound of the work done: one small kernel at a time
  reads busy (SM activity, GPM, says how full it is). A CPU run has none.
- ``host``: on a CUDA rank, the GPU's time that is neither busy nor spent while the host waited for data: the
  host runs Python, launches kernels, or waits in a sync. On a CPU rank the host computes the step itself:
  the time not waiting for data.
- ``sync``: its time is never measured (that would take a sync or a profiler); the counted step's syncs
  (``flops`` event, CUDA only) are given as ``syncs_per_step`` and their time is inside ``host``.

On a CUDA rank the shares divide the GPU's time: busy, then idle while the host waited for data (at most the
data wait: the GPU may still run queued work while the host waits), then the rest. They add up to 1 where
all are known.
"""

from __future__ import annotations

from typing import Any

SPLIT_KEYS = ("gpu_busy", "data", "host", "sync")


def time_split(tele: Any) -> dict[str, Any] | None:
    """The split of the rank that waits for data most (else the lowest rank with steps); None before any step.

    ``{"rank", "device", "gpu_busy", "data", "host", "sync", "syncs_per_step", "unknown": {share: why}}``."""
    devices = {rank: m.device for rank, m in tele.memory.items() if m.device}
    if not devices:
        return None
    feeds = tele.feeding.ranks
    shares = {rank: feeds[rank].share() if rank in feeds else None for rank in devices}
    known = [(share, rank) for rank, share in shares.items() if share is not None]
    rank = max(known)[1] if known else min(devices)
    device, data = devices[rank], shares[rank]
    out: dict[str, Any] = {"rank": rank, "device": device, **dict.fromkeys(SPLIT_KEYS), "syncs_per_step": None}
    unknown: dict[str, str] = {}
    if data is None:
        why = "no DataLoader feeds it" if rank not in feeds or feeds[rank].loader is None else "too few steps yet"
        unknown["data"] = f"data wait not measured: {why}"
    if device == "cpu":
        unknown["gpu_busy"] = "a CPU run: no GPU"
        unknown["sync"] = "a CPU run: no device to wait for"
        if data is not None:
            out["data"], out["host"] = round(data, 3), round(1.0 - data, 3)
        else:
            unknown["host"] = "the host's share is what the data wait leaves: not known without it"
        out["unknown"] = unknown
        return out
    gpu = feeds[rank].gpu if rank in feeds else None
    busy = min(1.0, max(0.0, gpu[1] / 100.0)) if gpu is not None else None
    count = tele.use.counts.get(rank) or {}
    syncs = count.get("syncs")
    if isinstance(syncs, int):
        out["syncs_per_step"] = syncs
    if syncs:
        sites = ", ".join(str(s.get("site")) for s in count.get("sync_sites") or () if isinstance(s, dict))
        unknown["sync"] = f"{syncs} sync(s) in the counted step{f' ({sites})' if sites else ''}: their time is in host"
    else:
        unknown["sync"] = "syncs are counted once per shape (0 or not counted yet); their time is never measured"
    if busy is None:
        unknown["gpu_busy"] = "no NVML utilisation of its GPU yet (the supervisor looks every 15 s)"
        if data is not None:
            out["data"] = round(data, 3)
        unknown["host"] = "the host's share is what the GPU's busy time leaves: not known without it"
        out["unknown"] = unknown
        return out
    out["gpu_busy"] = round(busy, 3)
    if data is not None:
        idle_data = min(data, 1.0 - busy)
        out["data"], out["host"] = round(idle_data, 3), round(max(0.0, 1.0 - busy - idle_data), 3)
    else:
        unknown["host"] = "the GPU's idle time is not split without the data wait"
    out["unknown"] = unknown
    return out


def split_parts(split: dict[str, Any]) -> list[tuple[str, str]]:
    """[(key, "GPU busy 62%"), (key, "data 30%"), ...]; a share not known reads "?"; a CPU run has no GPU parts."""
    names = {"gpu_busy": "GPU busy", "data": "data", "host": "host", "sync": "sync"}
    parts = []
    for key in SPLIT_KEYS:
        if key in ("gpu_busy", "sync") and split.get("device") == "cpu":
            continue  # a CPU run: no GPU to speak of
        value = split.get(key)
        text = f"{value:.0%}" if isinstance(value, int | float) else "?"
        if key == "sync" and isinstance(split.get("syncs_per_step"), int) and split["syncs_per_step"]:
            text += f" ({split['syncs_per_step']}/step, in host)"
        parts.append((key, f"{names[key]} {text}"))
    return parts


def split_words(split: dict[str, Any] | None) -> str:
    """ "GPU busy 62% · data 30% · host 8% · sync ?" (a share not known: "?")."""
    return " · ".join(words for _, words in split_parts(split)) if split else ""
