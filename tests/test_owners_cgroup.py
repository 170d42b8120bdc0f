"""The cgroup paths container runtimes, Kubernetes and Slurm write, read back as the owner they name.

tests/data/cgroups/ holds one /proc/PID/cgroup per shape: Kubernetes on cgroup v1 and v2 with the systemd and
cgroupfs drivers (Docker, containerd and CRI-O runtimes, a guaranteed and a static pod), Docker, Podman
(rootful, rootless, conmon, cgroupfs) and Slurm (v1, v2, batch step, multiple slurmd)."""

from __future__ import annotations

import os
import signal
from dataclasses import replace
from pathlib import Path

import pytest

from gpumon.core.fleet.stream import stream_doc
from gpumon.core.model import GpuDevice, GpuProcess, GpuSample, HostSample, Snapshot
from gpumon.core.owners import PID_NAMESPACE_NOTE, CgroupOwner, Owners, owner_text, parse_cgroup
from gpumon.core.signals import send_signal

DATA = Path(__file__).parent / "data" / "cgroups"
C1 = "0f4ce2a1b8d74c3e9a62f4b8e0c1d2a3b4c5d6e7f8091a2b3c4d5e6f7a8b9c0d"
C2 = "9d1e5b7c3a2f4e6d8c0b1a2938475665748392a1b0c9d8e7f6a5b4c3d2e1f009"
UID = "5e2f8c1a-7b3d-4e9f-a6c0-1d2e3f4a5b6c"

EXPECTED = {
    "k8s-v1-cgroupfs-docker": CgroupOwner(C1, None, UID),
    "k8s-v1-systemd-containerd": CgroupOwner(C1, "containerd", UID),
    "k8s-v1-systemd-containerd-service": CgroupOwner(C1, "containerd", UID),
    "k8s-v2-systemd-containerd": CgroupOwner(C1, "containerd", UID),
    "k8s-v2-systemd-crio-guaranteed": CgroupOwner(C1, "cri-o", UID),
    "k8s-v2-cgroupfs-containerd": CgroupOwner(C1, None, UID),
    "k8s-v2-systemd-static-pod": CgroupOwner(C1, "containerd", "2b5c4e0e4d8c0c9c3f1c4a6f7d7f5e0a"),
    "docker-v1-cgroupfs": CgroupOwner(C2, "docker"),
    "docker-v2-systemd": CgroupOwner(C2, "docker"),
    "docker-v1-hybrid-recorded": CgroupOwner(  # recorded here: Debian's dockerd 20.10, cgroupfs driver
        "a99f1ded19a16851ea7f06dfa49a835c9d508370f25bd71c8d5869eb1e461064", "docker"
    ),
    "podman-v2-rootful": CgroupOwner(C2, "podman"),
    "podman-v2-rootless": CgroupOwner(C2, "podman"),
    "podman-v2-conmon": CgroupOwner(),  # podman's monitor, outside the container
    "podman-v1-cgroupfs": CgroupOwner(C2, "podman"),
    "slurm-v1-task": CgroupOwner(slurm_job="4242"),
    "slurm-v2-task": CgroupOwner(slurm_job="4242"),
    "slurm-v2-batch": CgroupOwner(slurm_job="4243"),
    "slurm-v1-multi-slurmd": CgroupOwner(slurm_job="4244"),
    "host-session": CgroupOwner(),
    "host-v1-hybrid": CgroupOwner(),  # this machine's: a 32-hex group that is no container
}


def test_every_recorded_shape_has_its_expectation() -> None:
    assert sorted(p.stem for p in DATA.glob("*.cgroup")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_cgroup_path_names_its_owner(name: str) -> None:
    assert parse_cgroup((DATA / f"{name}.cgroup").read_text()) == EXPECTED[name]


def _machine(tmp_path: Path, pid: int, cgroup: str, environ: bytes = b"") -> Path:
    proc = tmp_path / "proc" / str(pid)
    proc.mkdir(parents=True)
    (proc / "cgroup").write_text((DATA / f"{cgroup}.cgroup").read_text())
    (proc / "environ").write_bytes(environ)
    return tmp_path


def _sample(*pids: int) -> GpuSample:
    procs = tuple(GpuProcess(0, pid, 1 << 30, None, "compute", user="alice", command="python train.py") for pid in pids)
    return GpuSample("nvml", (GpuDevice(0, "GPU", "GPU-0", processes=procs),), 0.0)


def test_recorded_kubelet_names_the_pod_and_container(tmp_path: Path) -> None:
    root = _machine(tmp_path, 4100, "k8s-v2-systemd-containerd")
    (root / "var/log/containers").mkdir(parents=True)
    (root / f"var/log/containers/trainer-0_ml-team_pytorch-{C1}.log").touch()
    (root / f"var/log/pods/ml-team_trainer-0_{UID}").mkdir(parents=True)
    proc = Owners(root).attribute(_sample(4100)).devices[0].processes[0]
    assert (proc.pod, proc.namespace, proc.container_name, proc.pod_uid) == ("trainer-0", "ml-team", "pytorch", UID)
    assert owner_text(proc) == "ml-team/trainer-0"


def test_pod_named_from_its_log_folder_alone(tmp_path: Path) -> None:
    root = _machine(tmp_path, 4101, "k8s-v1-cgroupfs-docker")
    (root / f"var/log/pods/default_bert-finetune-7c9_{UID}").mkdir(parents=True)
    proc = Owners(root).attribute(_sample(4101)).devices[0].processes[0]
    assert (proc.pod, proc.namespace, proc.container_id) == ("bert-finetune-7c9", "default", C1)


def test_slurm_job_from_the_environment_where_the_cgroup_does_not_say(tmp_path: Path) -> None:
    root = _machine(tmp_path, 4102, "host-session", b"HOME=/home/a\0SLURM_JOB_ID=777\0SLURM_PROCID=0\0")
    proc = Owners(root).attribute(_sample(4102)).devices[0].processes[0]
    assert proc.slurm_job == "777" and owner_text(proc) == "slurm 777"


def test_own_pid_namespace_shows_no_wrong_process(tmp_path: Path) -> None:
    root = _machine(tmp_path, 4103, "docker-v2-systemd")
    (root / "proc/self").mkdir()
    (root / "proc/self/status").write_text("Name:\tgpumon\nNSpid:\t812345\t7\n")
    sample = Owners(root).attribute(_sample(4103, 4104))
    procs = sample.devices[0].processes
    assert [(p.user, p.command, p.foreign_pid) for p in procs] == [(None, None, True)] * 2
    assert sample.reason == PID_NAMESPACE_NOTE and "--pid=host" in sample.reason and "hostPID" in sample.reason
    outcome = send_signal(replace(procs[0], pid=os.getpid()), signal.SIGCONT)  # here, this PID is pytest's
    assert not outcome.ok and "the host's" in outcome.message


def test_a_fleet_host_sends_its_owners(tmp_path: Path) -> None:
    """The fleet's compact line keeps them, so the fleet knows who owns a remote host's processes."""
    root = _machine(tmp_path, 4105, "slurm-v2-task")
    gpu = Owners(root).attribute(_sample(4105))
    host = HostSample("h", 1.0, (1.0,), None, 1, 2, 0, 0, 0.0)
    sent = stream_doc(Snapshot(gpu, host), fields="fleet")["processes"][0]
    assert sent["slurm_job"] == "4242" and "pod" not in sent  # a key without a value is left out
