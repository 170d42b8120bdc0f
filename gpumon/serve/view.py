"""What serve publishes once a poll: one immutable ``View`` every request reads (state.py builds it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpumon.serve.runs_view import StepHistogram

# never the command; its owners (core/owners.py) as the JSON has them
PROCESS_KEYS = (
    "gpu_index",
    "pid",
    "user",
    "used_memory",
    "sm_util",
    "kind",
    "simulated",
    "container_id",
    "container_runtime",
    "container_name",
    "pod_uid",
    "pod",
    "namespace",
    "slurm_job",
)


@dataclass(frozen=True)
class HostView:
    name: str
    link: str  # "local" for serve's own host; a fleet host's link: "connecting", "live", "stale", "down"
    reason: str | None = None
    devices: tuple[dict[str, Any], ...] = ()
    processes: tuple[dict[str, Any], ...] = ()
    runs: tuple[dict[str, Any], ...] = ()
    queue: int = 0  # runs waiting in the GPU queue
    time: float | None = None  # the snapshot's time
    source: str = ""  # "nvml", "nvidia-smi", "simulated", "none"
    gpu_reason: str | None = None  # why no (or not every) GPU shows


@dataclass(frozen=True)
class View:
    time: float
    hosts: tuple[HostView, ...] = ()
    alerts: tuple[dict[str, Any], ...] = ()  # newest first
    alert_counts: dict[tuple[str, str], int] = field(default_factory=dict)  # (host, kind) -> alerts seen
    steps: dict[str, StepHistogram] = field(default_factory=dict)  # live run id -> its step time histogram
    error: str | None = None  # the last poll's failure, if it failed
    snapshots: dict[tuple[str, str], str] = field(default_factory=dict)  # (run id, name) -> a kept CUDA snapshot
