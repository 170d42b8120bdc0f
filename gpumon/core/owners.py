"""Who owns a GPU process beyond its user: its container, Kubernetes pod and Slurm job, from /proc.

Every file is read under a root (``GPUMON_SYS_ROOT``, default ``/``) so a recorded machine replays. The
cgroup path names the container (``docker-<id>.scope``, ``cri-containerd-<id>.scope``, ``libpod-<id>``,
``/docker/<id>``), the pod (``pod<uid>``, the pattern dcgm-exporter matches) and the Slurm job (``job_<id>``);
a job not in the cgroup path (proctrack/linuxproc) is read from the process's ``SLURM_JOB_ID``. Names come
from core/container_names.py, cached per container.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from gpumon.core.container_names import ContainerNames
from gpumon.core.gpu.simulated import SIM_PID_BASE
from gpumon.core.model import GpuProcess, GpuSample

ROOT_ENV = "GPUMON_SYS_ROOT"
_HEX = r"[0-9a-f]{64}"
# (pattern on one cgroup path component, runtime): the first that matches names the container
_CONTAINER = (
    (re.compile(rf"^docker-({_HEX})\.scope$"), "docker"),
    (re.compile(rf"(?:^|:)cri-containerd[-:]({_HEX})(?:\.scope)?$"), "containerd"),
    (re.compile(rf"(?:^|:)crio[-:]({_HEX})(?:\.scope)?$"), "cri-o"),
    (re.compile(rf"^libpod-({_HEX})(?:\.scope)?$"), "podman"),
    (re.compile(rf"(?:^|:)docker:({_HEX})$"), "docker"),
    (re.compile(rf"^({_HEX})(?:\.scope)?$"), None),  # cgroupfs: the bare id; its parent says whose
)
_PARENT_RUNTIME = {"docker": "docker", "libpod_parent": "podman"}
# dcgm-exporter's pod([a-f0-9_-]+), bounded to a pod UID (a uuid, or a static pod's 32-hex hash)
_POD = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32})\b")
_JOB = re.compile(r"(?:^|/)job_(\d+)(?:/|$)")
PID_NAMESPACE_NOTE = (
    "gpumon runs in a PID namespace of its own (a container without --pid=host, or a pod without "
    "hostPID: true): the driver's PIDs are the host's and name no process here, so processes show "
    "their PID and memory only. Run the container with --pid=host (Kubernetes: hostPID: true)."
)


def sys_root() -> Path:
    return Path(os.environ.get(ROOT_ENV) or "/")


@dataclass(frozen=True, slots=True)
class CgroupOwner:
    container_id: str | None = None
    runtime: str | None = None  # "docker", "containerd", "cri-o", "podman"; None where the path does not say
    pod_uid: str | None = None
    slurm_job: str | None = None


def parse_cgroup(text: str) -> CgroupOwner:
    """The container, pod and Slurm job a ``/proc/PID/cgroup`` names (cgroup v1 or v2, systemd or cgroupfs)."""
    container = runtime = pod = job = None
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        parts = [p for p in path.split("/") if p]
        for i, part in enumerate(parts):
            for pattern, kind in _CONTAINER:
                found = pattern.search(part)
                if found and container is None:
                    container = found.group(1)
                    runtime = kind or (_PARENT_RUNTIME.get(parts[i - 1]) if i else None)
                    break
        pod = pod or _pod_uid(path)
        job = job or next(iter(_JOB.findall(path)), None)
    return CgroupOwner(container, runtime, pod, job)


def _pod_uid(path: str) -> str | None:
    found = _POD.search(path)
    return found.group(1).replace("_", "-") if found else None  # systemd's slice names write '-' as '_'


def in_own_pid_namespace(root: Path) -> bool:
    """True when this process's PID namespace is nested (``NSpid`` lists more than one PID): not the host's."""
    try:
        for line in (root / "proc/self/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return len(line.split()) > 2
    except OSError:
        pass
    return False


def _environ_job(root: Path, pid: int) -> str | None:
    try:
        data = (root / f"proc/{pid}/environ").read_bytes()
    except OSError:  # another user's process: unreadable without root
        return None
    for item in data.split(b"\0"):
        if item.startswith(b"SLURM_JOB_ID="):
            return item[len(b"SLURM_JOB_ID=") :].decode(errors="replace") or None
    return None


class Owners:
    """Adds each process's owner to a sample: read once per (PID, start time), names once per container."""

    def __init__(self, root: Path | None = None, names: ContainerNames | None = None) -> None:
        self.root = root if root is not None else sys_root()
        self.names = names if names is not None else ContainerNames(self.root)
        self.nested = in_own_pid_namespace(self.root)
        self._cache: dict[tuple[int, float | None], GpuProcess] = {}  # (pid, start) -> the process's owner fields

    def attribute(self, sample: GpuSample) -> GpuSample:
        real = any(not p.simulated for d in sample.devices for p in d.processes)
        if self.nested and real:  # wrong processes would be worse than none: said once, in the sample's reason
            reason = f"{sample.reason}; {PID_NAMESPACE_NOTE}" if sample.reason else PID_NAMESPACE_NOTE
            devices = tuple(replace(d, processes=tuple(_foreign(p) for p in d.processes)) for d in sample.devices)
            return replace(sample, devices=devices, reason=reason)
        live: set[tuple[int, float | None]] = set()
        devices = tuple(replace(d, processes=tuple(self._owned(p, live) for p in d.processes)) for d in sample.devices)
        for key in [k for k in self._cache if k not in live]:
            del self._cache[key]
        return replace(sample, devices=devices)

    def _owned(self, p: GpuProcess, live: set[tuple[int, float | None]]) -> GpuProcess:
        if p.simulated and p.pid >= SIM_PID_BASE:  # no such process: nothing to read
            return p
        key = (p.pid, p.create_time)  # another process under a reused PID is read again
        live.add(key)
        owner = self._cache.get(key)
        if owner is None:
            owner = self._cache[key] = self.read(p.pid)
        return _with(p, owner)

    def read(self, pid: int) -> GpuProcess:
        """The owner fields of ``pid`` (on a blank GpuProcess)."""
        try:
            cgroup = parse_cgroup((self.root / f"proc/{pid}/cgroup").read_text())
        except OSError:
            cgroup = CgroupOwner()
        job = cgroup.slurm_job or _environ_job(self.root, pid)
        found = self.names.lookup(cgroup.container_id, cgroup.runtime, cgroup.pod_uid)
        return GpuProcess(
            gpu_index=-1,
            pid=pid,
            used_memory=None,
            sm_util=None,
            kind="",
            container_id=cgroup.container_id,
            container_runtime=cgroup.runtime,
            container_name=found.container,
            pod_uid=cgroup.pod_uid,
            pod=found.pod,
            namespace=found.namespace,
            slurm_job=job,
        )


OWNER_FIELDS = ("container_id", "container_runtime", "container_name", "pod_uid", "pod", "namespace", "slurm_job")


def _with(p: GpuProcess, o: GpuProcess) -> GpuProcess:
    return replace(p, **{name: getattr(o, name) for name in OWNER_FIELDS})


def _foreign(p: GpuProcess) -> GpuProcess:
    if p.simulated:
        return p
    return replace(p, user=None, command=None, create_time=None, parents=(), foreign_pid=True)


def owner_text(p: GpuProcess) -> str:
    """What the OWNER column says: the pod, else the container, else the Slurm job; '' for none."""
    if p.pod or p.pod_uid:
        return f"{p.namespace}/{p.pod}" if p.pod and p.namespace else f"pod {p.pod or (p.pod_uid or '')[:8]}"
    if p.container_id:
        return f"{p.container_runtime or 'container'} {p.container_name or p.container_id[:12]}"
    return f"slurm {p.slurm_job}" if p.slurm_job else ""
