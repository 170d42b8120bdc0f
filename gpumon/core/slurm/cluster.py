"""What Slurm says about the cluster, read with its own commands: the user's running jobs (``squeue --me``),
their node lists expanded (``scontrol show hostnames``) and each partition's nodes and free GPUs (``sinfo``).

Every command runs as an argument list with a timeout; a failure is a ``SlurmError`` whose message says
why in words. Parsing is defensive: a line that is not what was asked for is skipped, never fatal.
Other users' jobs are never read here: ``squeue --me`` lists only the caller's.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

TIMEOUT_S = 10.0
#: The Slurm commands ``--slurm`` needs, in the order they are looked for.
COMMANDS = ("squeue", "sinfo", "srun", "scontrol")
_SEP = "|"  # squeue's/sinfo's field separator here: no partition, node list or id holds one
#: sinfo's node state flags (a trailing character): "*" not responding, "~" powered off, ...
_FLAGS = "*~#!%$@^-+"
_DOWN = ("down", "drain", "drng", "drained", "draining", "fail", "failg", "failing", "maint", "inval", "unk")


class SlurmError(RuntimeError):
    """A Slurm command that could not run or failed; the message says why in words."""


def missing_command(names: Iterable[str] = COMMANDS) -> str | None:
    """The first of Slurm's commands not on PATH (None: all are there)."""
    return next((name for name in names if shutil.which(name) is None), None)


def slurm_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for Slurm's commands: this one without the ``SLURM_*`` variables of an allocation
    gpumon may run inside (they would set the step's tasks, memory or ``SLURM_STEP_GRES=none``);
    ``SLURM_CONF`` stays (it says which cluster)."""
    env = dict(os.environ if base is None else base)
    return {k: v for k, v in env.items() if not k.startswith("SLURM_") or k == "SLURM_CONF"}


def run(argv: list[str], timeout: float = TIMEOUT_S) -> str:
    """The command's stdout; SlurmError with its own last line when it fails, or when it takes too long."""
    try:
        done = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout, env=slurm_env()
        )
    except FileNotFoundError:
        raise SlurmError(f"{argv[0]} not found: install Slurm's client commands or add them to PATH") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{argv[0]} did not answer in {timeout:.0f} s (is slurmctld up?)") from None
    except OSError as err:
        raise SlurmError(f"cannot run {argv[0]}: {err.strerror or err}") from None
    if done.returncode != 0:
        lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        said = lines[-1] if lines else f"exit status {done.returncode}"
        raise SlurmError(f"{argv[0]} failed: {said[:300]}")
    return done.stdout


# -- jobs ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Job:
    id: str  # what ``srun --jobid`` takes: unique per array element (squeue's %A)
    shown: str  # as squeue shows it: "123_4" for an array element, "7+1" for a heterogeneous component
    name: str
    user: str
    partition: str
    nodelist: str  # compressed: "gpu[01-03],cpu7"
    nodes: tuple[str, ...] = ()  # expanded


#: squeue's fields: the real id, the shown id, partition, user, node list, then the name (it may hold anything).
JOB_FORMAT = _SEP.join(("%A", "%i", "%P", "%u", "%N", "%j"))


def parse_jobs(text: str) -> list[Job]:
    """``squeue --noheader --format=JOB_FORMAT`` output as jobs; lines that are not that are skipped."""
    jobs = []
    for line in text.splitlines():
        parts = line.strip().split(_SEP, 5)
        if len(parts) != 6 or not re.fullmatch(r"[0-9]+", parts[0]) or not parts[4].strip():
            continue  # not a running job's line (no node yet, a warning, a header)
        job_id, shown, partition, user, nodelist, name = (p.strip() for p in parts)
        jobs.append(Job(job_id, shown, name, user, partition, nodelist))
    return jobs


def parse_hostnames(text: str) -> tuple[str, ...]:
    """``scontrol show hostnames LIST`` output: one node name per line."""
    return tuple(w for w in (line.strip() for line in text.splitlines()) if re.fullmatch(r"[A-Za-z0-9._-]+", w))


def running_jobs(timeout: float = TIMEOUT_S, cache: dict[str, tuple[str, ...]] | None = None) -> list[Job]:
    """The caller's running jobs with their nodes. ``cache``: node lists already expanded (they never change
    for a job), so a steady list of jobs costs one squeue per call. Raises SlurmError."""
    out = run(["squeue", "--me", "--states=RUNNING", "--noheader", f"--format={JOB_FORMAT}"], timeout)
    jobs = []
    cache = {} if cache is None else cache
    for job in parse_jobs(out):
        if job.nodelist not in cache:
            cache[job.nodelist] = parse_hostnames(run(["scontrol", "show", "hostnames", job.nodelist], timeout))
        jobs.append(Job(job.id, job.shown, job.name, job.user, job.partition, job.nodelist, cache[job.nodelist]))
    return jobs


# -- partitions ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Partition:
    name: str
    default: bool = False
    idle: int = 0
    mixed: int = 0
    allocated: int = 0
    down: int = 0  # down, drained, draining, failing, not responding
    other: int = 0  # completing, reserved, powering up, ...
    gpus: int = 0  # on its nodes that are up
    gpus_free: int = 0

    @property
    def nodes(self) -> int:
        return self.idle + self.mixed + self.allocated + self.down + self.other

    def words(self) -> str:
        """``gpu: 2 idle, 5 mixed, 1 down, 12 of 40 GPUs free`` (states with no node left out)."""
        counts = [(self.idle, "idle"), (self.mixed, "mixed"), (self.allocated, "allocated")]
        counts += [(self.down, "down"), (self.other, "other")]
        states = [f"{n} {what}" for n, what in counts if n] or ["no nodes"]
        gpus = f"{self.gpus_free} of {self.gpus} GPUs free" if self.gpus else "no GPUs"
        return f"{self.name}: {', '.join(states)}, {gpus}"


@dataclass(frozen=True, slots=True)
class ClusterSummary:
    partitions: tuple[Partition, ...] = field(default=())

    def line(self) -> str:
        """One line for the Fleet view's header and ``gpumon fleet``: every partition's nodes and free GPUs."""
        if not self.partitions:
            return "Slurm: no partitions"
        return "Slurm  " + "  ·  ".join(p.words() for p in self.partitions)


#: sinfo's fields, one line per node and partition (-N): partition, node, compact state, GRES, GRES in use.
#: "Partition", not "PartitionName": only the former marks the default partition with "*" (sinfo(1)).
SINFO_FORMAT = ",".join(f"{name}:0{_SEP}" for name in ("Partition", "NodeHost", "StateCompact", "Gres", "GresUsed"))


def gpu_count(gres: str) -> int:
    """GPUs in a GRES string: ``gpu:a100:4(S:0-1),gpu:2,shard:8`` -> 6; ``(null)`` -> 0."""
    total = 0
    for item in re.split(r",(?![^()]*\))", gres):  # commas inside "(IDX:0,2)" are not separators
        words = item.split("(")[0].strip().split(":")
        if words[0] != "gpu":
            continue
        count = words[-1] if len(words) > 1 else "1"
        total += int(count) if count.isdigit() else (0 if len(words) > 2 else 1)
    return total


def state_kind(state: str) -> str:
    """sinfo's compact state as idle, mixed, allocated, down or other; a flag "*" (not responding) is down."""
    word = state.strip().lower()
    if word.endswith("*"):
        return "down"
    word = word.rstrip(_FLAGS)
    if word in ("idle",):
        return "idle"
    if word in ("mix", "mixed"):
        return "mixed"
    if word in ("alloc", "allocated"):
        return "allocated"
    if word.startswith(_DOWN):
        return "down"
    return "other"


def parse_sinfo(text: str) -> ClusterSummary:
    """``sinfo --noheader -N -O SINFO_FORMAT`` output as one Partition per partition, in sinfo's order."""
    order: list[str] = []
    rows: dict[str, dict[str, int]] = {}
    defaults: set[str] = set()
    seen: set[tuple[str, str]] = set()
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(_SEP)]
        if len(parts) < 5 or not parts[0] or not parts[1]:
            continue
        name, node, state, gres, used = parts[:5]
        if name.endswith("*"):  # sinfo marks the default partition
            name = name[:-1]
            defaults.add(name)
        if (name, node) in seen:
            continue
        seen.add((name, node))
        if name not in rows:
            order.append(name)
            rows[name] = {"idle": 0, "mixed": 0, "allocated": 0, "down": 0, "other": 0, "gpus": 0, "gpus_free": 0}
        row, kind = rows[name], state_kind(state)
        row[kind] += 1
        if kind != "down":  # a down node's GPUs are no one's to use
            total = gpu_count(gres)
            row["gpus"] += total
            row["gpus_free"] += max(0, total - gpu_count(used)) if kind != "allocated" else 0
    return ClusterSummary(tuple(Partition(name, name in defaults, **rows[name]) for name in order))


def cluster_summary(timeout: float = TIMEOUT_S) -> ClusterSummary:
    """Every partition's nodes by state and its free GPUs, from ``sinfo``. Raises SlurmError."""
    return parse_sinfo(run(["sinfo", "--noheader", "-N", "-O", SINFO_FORMAT], timeout))
