"""``gpumon --slurm``: the nodes of the user's running Slurm jobs as fleet hosts, and the cluster's partitions.

Each (job, node) is one host whose stream is ``srun --jobid J --overlap --nodelist NODE gpumon snapshot
--json --watch``: a step inside the user's own job (no daemon, no port, no ssh, which many clusters forbid
to compute nodes). ``--overlap`` shares the job's CPUs, memory and GPUs with its running steps, so the
step waits for nothing and sees the job's GPUs (a step gets every GRES of its job by default). The
streaming, staleness and reconnecting are link.py's (``SrunLink`` only changes the argv and the reasons).

A thread of its own re-reads ``squeue --me`` and ``sinfo`` every ``REFRESH_S`` (sooner when a link
goes down: its job may have ended): an ended job's hosts go, a new job's come. Nothing here runs on a
UI's thread; ``state()`` and ``summary()`` only read references.
"""

from __future__ import annotations

import re
import shutil
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpumon.core.fleet.hosts import Host
from gpumon.core.fleet.link import RUNS_EVERY_S, RUNS_RECENT, HostLink, Publish
from gpumon.core.fleet.model import HostState
from gpumon.core.fleet.reasons import OLD_REMOTE
from gpumon.core.slurm.cluster import ClusterSummary, Job, SlurmError, cluster_summary, running_jobs, slurm_env

REFRESH_S = 12.0
SOON_S = 2.0  # a link went down: jobs are read again after this, not sooner (a job may end many links at once)
MAX_STREAMS = 32  # one srun each: a user with hundreds of array tasks gets the first 32 nodes
NOT_INSTALLED = "gpumon not found on the node: install it there, or set [slurm] gpumon = [...] in config.toml"
ENDED = "the job has ended"


def default_gpumon() -> list[str]:
    """This interpreter with ``-m gpumon``: on a cluster a venv usually lives on the shared home, where every
    node finds the same path (``[slurm] gpumon`` in config.toml says otherwise)."""
    return [sys.executable, "-m", "gpumon"]


def srun_reason(returncode: int | None, stderr: Sequence[str]) -> tuple[str, str | None]:
    """(reason, detail) from srun's exit status and its (or slurmstepd's) last lines."""
    lines = [line.strip() for line in stderr if line.strip()]
    text = "\n".join(lines).lower()
    errors = [line for line in lines if "error" in line.lower() and "exited with exit code" not in line.lower()]
    said: str | None = (errors or lines)[-1] if lines else None
    if "execve()" in text and ("no such file" in text or "permission denied" in text):
        return NOT_INSTALLED, said
    if returncode == 2 and ("invalid choice" in text or "unrecognized arguments" in text):
        return OLD_REMOTE, said
    if re.search(r"invalid job id|expired or invalid job|already completing or completed|job has expired", text):
        return ENDED, said
    if said:
        return said, None
    if returncode is not None and returncode < 0:
        return f"srun ended by signal {-returncode}", None
    return f"srun exited with status {returncode}", None


class SrunLink(HostLink):
    """A host reached through an ``srun --overlap`` step in the user's job instead of ssh."""

    def __init__(self, host: Host, job: Job, srun: str, gpumon: Sequence[str], interval: float, publish: Publish,
                 fields: str = "fleet", runs: float = RUNS_EVERY_S, recent: int = RUNS_RECENT) -> None:  # fmt: skip
        super().__init__(host, [srun], gpumon, interval, publish, fields, runs, recent)
        self.job = job

    def argv(self, remote: list[str]) -> list[str]:
        step = ["--jobid", self.job.id, "--overlap", "--nodelist", self.host.address, "--nodes", "1", "--ntasks", "1"]
        # --quiet: srun's own notes ("job step created") are not reasons; its errors still come.
        return [*self.ssh, *step, "--quiet", "--job-name", "gpumon", *self.gpumon, *remote]

    def env(self) -> dict[str, str]:
        return slurm_env()

    def classify(self, returncode: int | None, stderr: list[str]) -> tuple[str, str | None]:
        return srun_reason(returncode, stderr)


@dataclass(frozen=True, slots=True)
class SlurmStatus:
    """What the last read of the cluster found."""

    read_at: float | None = None  # None: not read yet
    jobs: tuple[Job, ...] = ()
    summary: ClusterSummary | None = None
    reason: str | None = None  # why squeue or sinfo failed at the last read
    jobs_failed: bool = False  # squeue failed at the last read: ``jobs`` are the ones read before
    left_out: int = 0  # nodes not streamed (over MAX_STREAMS)

    def line(self) -> str:
        """``Slurm  2 running jobs of yours on 3 nodes  ·  gpu: 2 idle, 5 mixed, 12 of 40 GPUs free``."""
        if self.read_at is None:
            return "Slurm  reading squeue and sinfo..."
        nodes = sum(len(job.nodes) for job in self.jobs)
        words = ["Slurm"]
        if self.jobs:
            plural = "s" if len(self.jobs) != 1 else ""
            words.append(f"{len(self.jobs)} running job{plural} of yours on {nodes} node{'s' if nodes != 1 else ''}")
        elif not self.jobs_failed:  # else the reason says why they are not known
            words.append("no running job of yours")
        if self.left_out:
            words.append(f"{self.left_out} nodes not shown (at most {MAX_STREAMS} streams)")
        if self.summary is not None:
            words += [p.words() for p in self.summary.partitions]
        if self.reason:
            words.append(self.reason)
        return words[0] + "  " + "  ·  ".join(words[1:])


def host_name(job: Job, node: str) -> str:
    return f"{node} (job {job.shown})"


class SlurmFleet:
    def __init__(
        self,
        interval: float,
        gpumon: Sequence[str] | None = None,
        refresh: float = REFRESH_S,
        fields: str = "fleet",
        runs_every: float = RUNS_EVERY_S,
        recent: int = RUNS_RECENT,
        on_change: Callable[[tuple[HostState, ...]], None] | None = None,
    ) -> None:
        """``gpumon``: the command on the nodes (default: ``default_gpumon()``); ``runs_every`` 0 reads no runs."""
        self.interval, self.refresh, self.fields = interval, refresh, fields
        self.gpumon = list(gpumon) if gpumon else default_gpumon()
        self.runs_every, self.recent = runs_every, recent
        self.on_change = on_change
        self.srun = shutil.which("srun") or "srun"
        self.status = SlurmStatus()
        self._lock = threading.Lock()
        self._changed = threading.Condition()
        self._links: dict[str, SrunLink] = {}  # host name -> its link, in squeue's order
        self._states: dict[str, HostState] = {}
        self._hosts: tuple[HostState, ...] = ()
        self._stop = threading.Event()
        self._soon = threading.Event()
        self._thread: threading.Thread | None = None
        self._expanded: dict[str, tuple[str, ...]] = {}
        self._stoppers: list[threading.Thread] = []  # ending the links of jobs that left: joined by stop()

    # -- the public face -------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gpumon-slurm", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """End the reader and every srun step of ours (in parallel: each may take its 2 s grace)."""
        with self._lock:
            self._stop.set()
        self._soon.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        with self._lock:
            links = list(self._links.values())
            self._links.clear()
        _stop_all(links)
        for thread in self._stoppers:
            thread.join(timeout=30)

    def state(self) -> tuple[HostState, ...]:
        """One state per (job, node), in squeue's order: a reference, cheap for a view to read each frame."""
        return self._hosts

    def summary(self) -> str:
        """The line for the Fleet view's header: your jobs, each partition's nodes and free GPUs."""
        return self.status.line()

    def wait(self, predicate: Callable[[SlurmFleet], bool], timeout: float) -> None:
        """Until ``predicate(self)`` holds, or ``timeout`` seconds have passed."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(self) and (left := deadline - time.monotonic()) > 0:
                self._changed.wait(min(left, 0.5))

    # -- the reader ----------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self._read()
            except Exception as err:  # noqa: BLE001 - a bug here must show as a reason, never end gpumon
                self.status = SlurmStatus(time.time(), self.status.jobs, self.status.summary, f"gpumon failed: {err!r}")
                self._notify()
            self._soon.clear()
            if self._soon.wait(self.refresh):  # a link went down: read again soon, not at once
                self._stop.wait(max(0.0, SOON_S - (time.monotonic() - started)))

    def _read(self) -> None:
        reasons = []
        try:
            jobs = tuple(running_jobs(cache=self._expanded))
        except SlurmError as err:
            jobs, reasons = self.status.jobs, [str(err)]  # the links stream on their own: keep them
        else:
            self._reconcile(jobs)  # starts nothing once stop() has begun
        try:
            summary: ClusterSummary | None = cluster_summary()
        except SlurmError as err:
            summary = self.status.summary
            reasons.append(str(err))
        wanted = sum(len(job.nodes) for job in jobs)
        left_out = max(0, wanted - MAX_STREAMS)
        failed = bool(reasons) and reasons[0].startswith(("squeue", "scontrol"))
        reason = "; ".join(reasons) or None
        self.status = SlurmStatus(time.time(), jobs, summary, reason, jobs_failed=failed, left_out=left_out)
        self._notify()

    def _reconcile(self, jobs: tuple[Job, ...]) -> None:
        wanted = [(host_name(job, node), job, node) for job in jobs for node in job.nodes][:MAX_STREAMS]
        names = {name for name, _, _ in wanted}
        with self._lock:
            if self._stop.is_set():  # stop() collects the links under this lock: start none after it
                return
            gone = [link for name, link in self._links.items() if name not in names]
            links: dict[str, SrunLink] = {}
            new = []
            for name, job, node in wanted:
                link = self._links.get(name)
                if link is None:
                    link = SrunLink(Host(name, node), job, self.srun, self.gpumon, self.interval, self._publish,
                                    self.fields, self.runs_every, self.recent)  # fmt: skip
                    new.append(link)
                    self._states[name] = link.state
                links[name] = link
            self._links = links
            for link in gone:
                self._states.pop(link.host.name, None)
            self._hosts = tuple(self._states[name] for name in links)
        for link in new:
            link.start()
        if gone:  # their steps end with their jobs; a job still running (left the first 32) needs ours stopped
            stopper = threading.Thread(target=_stop_all, args=(gone,), daemon=True)
            self._stoppers = [t for t in self._stoppers if t.is_alive()] + [stopper]
            stopper.start()

    def _publish(self, state: HostState) -> None:
        with self._lock:
            if state.host.name not in self._links:
                return  # a link being stopped: its host is gone
            self._states[state.host.name] = state
            self._hosts = tuple(self._states[name] for name in self._links)
        if state.link == "down":
            self._soon.set()
        self._notify()

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()
        if self.on_change is not None:
            self.on_change(self._hosts)


def _stop_all(links: Sequence[HostLink]) -> None:
    stoppers = [threading.Thread(target=link.stop, daemon=True) for link in links]
    for thread in stoppers:
        thread.start()
    for thread in stoppers:
        thread.join()


def settled(fleet: SlurmFleet, runs: bool = False) -> bool:
    """The jobs were read and every host has answered: live or stale with a snapshot (and, with ``runs``,
    its runs read), or down with its reason."""
    if fleet.status.read_at is None:
        return False
    for h in fleet.state():
        if h.link == "down":
            continue
        if h.link not in ("live", "stale") or h.snapshot is None or (runs and not (h.runs_at or h.runs_reason)):
            return False
    return True
