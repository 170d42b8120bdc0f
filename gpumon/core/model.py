"""Immutable snapshots that sources produce and every view (TUI, CLI, JSON) reads.

A value that could not be read is ``None``; views print it as "N/A" and the
reason, when known, sits in the device's ``na`` map (field name -> reason).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

#: Bumped whenever a key of ``Snapshot.to_dict`` changes meaning or disappears.
SNAPSHOT_SCHEMA = 1


@dataclass(frozen=True, slots=True)
class GpuProcess:
    gpu_index: int
    pid: int
    used_memory: int | None  # bytes
    sm_util: float | None  # percent, from NVML's per-process samples
    kind: str | None  # "compute" | "graphics"; None: unknown (an older gpumon's fleet line left it out)
    user: str | None = None
    command: str | None = None
    create_time: float | None = None  # guards signals against PID reuse
    simulated: bool = False
    parents: tuple[tuple[int, str], ...] = ()  # (pid, command) of its parent, grandparent... (init left out)
    # who owns it beyond its user (core/owners.py): None where nothing says
    container_id: str | None = None  # the full id from its cgroup path
    container_runtime: str | None = None  # "docker" | "containerd" | "cri-o" | "podman"; None where unknown
    container_name: str | None = None  # from the runtime's socket or the kubelet's log links
    pod_uid: str | None = None
    pod: str | None = None
    namespace: str | None = None  # the pod's Kubernetes namespace
    slurm_job: str | None = None
    foreign_pid: bool = False  # the host's PID seen from a PID namespace of our own: names no process here


@dataclass(frozen=True, slots=True)
class GpuDevice:
    index: int
    name: str | None
    uuid: str | None
    state: str = "ok"  # "ok" | "lost" | "error"
    reason: str | None = None  # why the state is not "ok"
    gpu_util: float | None = None  # percent
    mem_util: float | None = None  # percent (memory controller busy)
    mem_used: int | None = None  # bytes
    mem_total: int | None = None  # bytes
    temperature: int | None = None  # degrees C
    power_draw: float | None = None  # watts
    power_limit: float | None = None  # watts
    fan: int | None = None  # percent
    sm_clock: int | None = None  # MHz
    mem_clock: int | None = None  # MHz
    pstate: int | None = None  # 0 (max performance) .. 15
    ecc_errors: int | None = None  # volatile uncorrected
    mig_mode: bool | None = None
    vendor: str = "nvidia"  # "nvidia" | "amd" | "intel": which reader gave it (docs/gpu.md)
    gtt_used: int | None = None  # bytes; AMD's GTT: system memory the GPU maps (None elsewhere)
    gtt_total: int | None = None
    # NVML GPM (Hopper+, core/gpu/gpm.py), 0..1 over the last sampling interval; None with ``na[...]``'s reason
    sm_active: float | None = None  # share of SMs busy (cycle-based: what utilisation's "any kernel" is not)
    sm_occupancy: float | None = None  # resident warps over the maximum
    tensor_active: float | None = None  # tensor cores busy
    dram_active: float | None = None  # DRAM bandwidth used over its peak
    processes: tuple[GpuProcess, ...] = ()
    processes_reason: str | None = None  # why the process list is N/A
    na: dict[str, str] = field(default_factory=dict)

    @property
    def mem_percent(self) -> float | None:
        if self.mem_used is None or not self.mem_total:
            return None
        return 100.0 * self.mem_used / self.mem_total


@dataclass(frozen=True, slots=True)
class GpuSample:
    source: str  # "nvml" | "nvidia-smi" | "amdgpu" | "intel" | "simulated" | "none", or several joined by "+"
    devices: tuple[GpuDevice, ...]
    time: float
    reason: str | None = None  # why no (or not every) GPU is shown
    driver: str | None = None

    @property
    def simulated(self) -> bool:
        return "simulated" in self.source.split("+")  # "simulated+amdgpu": simulated GPUs beside a recording


@dataclass(frozen=True, slots=True)
class HostSample:
    hostname: str
    cpu_percent: float
    per_cpu: tuple[float, ...]
    load: tuple[float, float, float] | None
    mem_used: int
    mem_total: int
    # None: unknown (an older gpumon's fleet line left them out, as it left out per_cpu: then empty)
    swap_used: int | None
    swap_total: int | None
    time: float | None

    @property
    def mem_percent(self) -> float:
        return 100.0 * self.mem_used / self.mem_total if self.mem_total else 0.0


@dataclass(frozen=True, slots=True)
class Snapshot:
    gpu: GpuSample
    host: HostSample

    def to_dict(self) -> dict[str, Any]:
        """The stable JSON document of ``gpumon snapshot --json``."""
        devices = []
        processes: list[dict[str, Any]] = []
        for dev in self.gpu.devices:
            d = asdict(dev)
            d.pop("processes")
            d["mem_percent"] = dev.mem_percent
            devices.append(d)
            processes.extend(asdict(p) | {"parents": [list(x) for x in p.parents]} for p in dev.processes)  # JSON lists
        host = asdict(self.host)
        host["load"] = list(self.host.load) if self.host.load else None
        host["per_cpu"] = list(self.host.per_cpu)
        return {
            "schema": SNAPSHOT_SCHEMA,
            "time": self.gpu.time,
            "source": self.gpu.source,
            "simulated": self.gpu.simulated,
            "driver": self.gpu.driver,
            "reason": self.gpu.reason,
            "devices": devices,
            "processes": processes,
            "host": host,
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Snapshot:
        """A ``to_dict`` document (another host's ``gpumon snapshot --json``) as a Snapshot again.

        Keys this version does not know are ignored and missing ones take their defaults, so a
        host running a newer or older gpumon of the same schema still shows: what an older fleet line left
        out (a GPU's uuid, a process's kind, the host's swap, time and per-core use) reads as unknown. Raises
        ValueError for a document that is not a snapshot.
        """
        if not isinstance(doc, dict) or not isinstance(doc.get("host"), dict):
            raise ValueError("not a gpumon snapshot document (no host)")
        procs: dict[int, list[GpuProcess]] = {}
        for p in doc.get("processes") or ():
            proc = _known(GpuProcess, {"kind": None, **p})
            if not isinstance(proc.parents, tuple):  # JSON lists: tuples again, so samples compare equal
                proc = replace(proc, parents=tuple((int(pid), str(cmd)) for pid, cmd in proc.parents))
            procs.setdefault(proc.gpu_index, []).append(proc)
        devices = []
        for d in doc.get("devices") or ():
            fields_ = {"uuid": None} | {k: v for k, v in d.items() if k not in ("processes", "mem_percent")}
            fields_["processes"] = tuple(procs.get(d.get("index", -1), ()))
            fields_["na"] = dict(d.get("na") or {})
            devices.append(_known(GpuDevice, fields_))
        gpu = GpuSample(
            source=str(doc.get("source", "none")),
            devices=tuple(devices),
            time=float(doc.get("time") or 0.0),
            reason=doc.get("reason"),
            driver=doc.get("driver"),
        )
        h = {"swap_used": None, "swap_total": None, "time": None} | doc["host"]
        h["per_cpu"] = tuple(h.get("per_cpu") or ())
        h["load"] = tuple(h["load"]) if h.get("load") else None
        return cls(gpu=gpu, host=_known(HostSample, h))


def _known(kind: Any, values: dict[str, Any]) -> Any:
    """``kind(**values)`` with only the fields ``kind`` has; a missing required field is a ValueError."""
    names = {f.name for f in fields(kind)}
    try:
        return kind(**{k: v for k, v in values.items() if k in names})
    except TypeError as err:
        raise ValueError(f"not a gpumon snapshot document ({err})") from None
