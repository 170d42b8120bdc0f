"""A real one-node Slurm on this machine: munged, slurmctld and slurmd with their own config, state dirs and
ports, for the tests of ``--slurm`` (FIELD-NOTES: "Slurm on one machine").

``start_cluster(DIR)`` returns a started ``Cluster`` or why none could start, in words (not root, the packages
missing, a daemon that would not come up). Its ``env`` points Slurm's commands at this cluster (SLURM_CONF).
Nothing of the host's own Slurm or munge is touched.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import wait_until
from tests.ports import free_port

DAEMONS = ("munged", "slurmctld", "slurmd")
COMMANDS = ("sbatch", "squeue", "scancel", "sinfo", "srun", "scontrol")
MEMORY_MB = 4000  # what the node offers jobs: small enough that a memory limit is reached quickly


@dataclass
class Cluster:
    root: Path
    conf: Path
    node: str
    cpus: int
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv), env={**os.environ, **self.env}, capture_output=True, text=True, timeout=timeout
        )

    def jobs(self) -> list[str]:
        done = self.run("squeue", "--noheader", "--format=%i")
        return done.stdout.split()

    def cancel_all(self) -> None:
        for job in self.jobs():
            self.run("scancel", job)
        wait_until(lambda: not self.jobs(), timeout=30, step=0.5)

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.cancel_all()
        for name in reversed(DAEMONS):
            pid = self.pids.get(name) or _pid_of(self.root / f"{name}.pid")
            if pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
                if not wait_until(lambda p=pid: not _alive(p), timeout=15, step=0.2):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)  # a slurmd waiting on a job's stepd: never left behind


def _pid_of(path: Path) -> int:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][:1] != "Z"
    except OSError:
        return False


def _config(root: Path, node: str, cpus: int) -> str:
    ctld, slurmd = free_port(), free_port()
    return f"""\
ClusterName=gpumontest
SlurmctldHost={node}
SlurmctldPort={ctld}
SlurmdPort={slurmd}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/ctld
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
JobAcctGatherParams=OverMemoryKill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
JobCompType=jobcomp/filetxt
JobCompLoc={root}/jobcomp.txt
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
InactiveLimit=0
KillWait=30
OverTimeLimit=0
MinJobAge=600
DefMemPerCPU=500
SlurmdParameters=config_overrides
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={MEMORY_MB} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def start_cluster(root: Path, cpus: int | None = None) -> Cluster | str:
    """A started one-node cluster in ROOT, or why none could start. ``cpus``: what the node offers jobs, more
    than this machine has where tests run jobs side by side that mostly wait (slurmd's config_overrides)."""
    if os.geteuid() != 0:
        return "a test Slurm needs root (slurmd runs jobs as their user)"
    missing = [n for n in DAEMONS if not shutil.which(n, path="/usr/sbin:/usr/bin:/sbin")]
    missing += [n for n in COMMANDS if not shutil.which(n)]
    if missing:
        return f"Slurm/munge not installed ({', '.join(missing)} missing): apt-get install slurm-wlm munge"
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return "no 'munge' user: the munge package is not installed"
    node = socket.gethostname().split(".")[0]
    cpus = cpus or os.cpu_count() or 1
    for sub in ("munge", "ctld", "spool", "log"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)  # munged insists that its socket's directories be searchable by all
    munge = root / "munge"
    munge.chmod(0o755)
    key = munge / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    shutil.chown(munge, "munge", "munge")
    shutil.chown(key, "munge", "munge")
    conf = root / "slurm.conf"
    conf.write_text(_config(root, node, cpus))
    cluster = Cluster(root, conf, node, cpus)
    env = {**os.environ, **cluster.env}
    started = subprocess.run(
        ["runuser", "-u", "munge", "--", "munged", f"--socket={munge}/sock", f"--key-file={key}",
         f"--pid-file={munge}/pid", f"--log-file={munge}/log", f"--seed-file={munge}/seed"],
        capture_output=True, text=True,
    )  # fmt: skip
    if started.returncode != 0:
        return f"munged would not start: {started.stderr.strip()[:200]}"
    cluster.pids["munged"] = _pid_of(munge / "pid")
    for daemon in ("slurmctld", "slurmd"):
        done = subprocess.run([daemon, "-f", str(conf)], env=env, capture_output=True, text=True)
        if done.returncode != 0:
            cluster.stop()
            return f"{daemon} would not start: {(done.stderr or done.stdout).strip()[:200]}"
        cluster.pids[daemon] = _pid_of(root / f"{daemon}.pid")

    def idle() -> bool:
        out = cluster.run("sinfo", "--noheader", "--format=%t").stdout.split()
        return bool(out) and all(s in ("idle", "mix", "alloc") for s in out)

    if not wait_until(idle, timeout=60, step=0.5):
        log = (root / "log" / "slurmd.log").read_text(errors="replace")[-300:] if (root / "log").exists() else ""
        cluster.stop()
        return f"the test node never became idle: {log.strip()}"
    return cluster


def cluster_fixture(prefix: str, cpus: int | None = None) -> Iterator[Cluster]:
    """A module fixture's body: a cluster in a fresh mkdtemp (not pytest's 0700 tree: munged runs as munge),
    or the test skipped with the reason it could not start."""
    import pytest

    root = Path(tempfile.mkdtemp(prefix=prefix))
    started = start_cluster(root, cpus=cpus)
    if isinstance(started, str):
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(started)
    try:
        yield started
    finally:
        started.stop()
        shutil.rmtree(root, ignore_errors=True)
