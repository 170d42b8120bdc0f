"""What the supervisor knows of a run's processes and how it ends them all: its descendants (scanned, written
to status.json so the next gpumon finds them if this supervisor dies), the processes carrying the run's mark,
the runner's descendants, the run's cgroup; a signal to all of them, and the sweep at the run's end."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

import psutil

from gpumon.core.runs.record import cgroup
from gpumon.core.runs.record.marks import descendants, marked
from gpumon.core.runs.record.store import process_alive


class Tracking:
    """Mixed into the Supervisor, whose state it reads (``known``, ``child``, ``status``, ``run_dir``)."""

    known: dict[int, float]
    child: Any
    status: dict[str, Any]
    run_dir: Path

    def save(self, **fields: Any) -> bool:  # the Supervisor's
        raise NotImplementedError

    def _scan(self) -> None:
        """Remember every descendant (torchrun's workers leave our process group), and write them down:
        if this supervisor dies, the next gpumon still finds and ends every process of the run."""
        before = len(self.known)
        try:
            runner = self.child.proc.pid if self.child is not None else None
            for proc in psutil.Process(os.getpid()).children(recursive=True):
                if proc.pid == runner:
                    continue  # not the run's: it ends by itself once the command ended and its output is drained
                try:
                    self.known.setdefault(proc.pid, proc.create_time())
                except psutil.Error:
                    continue
        except psutil.Error:
            pass
        if len(self.known) != before:
            with contextlib.suppress(OSError):  # a full disk: the pids stay in memory
                self.save(procs=[[pid, started] for pid, started in self.known.items()])

    def _signal_all(self, sig: signal.Signals) -> None:
        self._scan()
        self._find_marked()
        if self.child is not None and not self.child.poll():
            with contextlib.suppress(OSError):
                os.killpg(self.child.pid, sig)
        elif self.child is None and process_alive(self.status.get("pid"), self.status.get("pid_create_time")):
            with contextlib.suppress(OSError):  # adopted: the group leader is the run's main process
                os.killpg(int(self.status["pgid"]), sig)
        for pid, started in list(self.known.items()):
            try:
                proc = psutil.Process(pid)
                if abs(proc.create_time() - started) < 0.5:
                    proc.send_signal(sig)
            except psutil.Error:
                self.known.pop(pid, None)

    def _find_marked(self) -> None:
        """Every process carrying the run's mark (marks.py): also those that left our tree (a double fork into
        a session of its own, a helper started before the first scan)."""
        me = os.getpid()
        for pid, started in marked(self.run_dir, self.status.get("created"), frozenset({me})).items():
            self.known.setdefault(pid, started)
        # and every descendant of the runner (a subreaper): a helper with an empty environment has no mark
        for pid, started in descendants(self.status.get("runner_pid"), self.status.get("runner_create_time")).items():
            self.known.setdefault(pid, started)
        for pid, started in cgroup.members(self.status.get("cgroup"), self.status.get("runner_pid")).items():
            self.known.setdefault(pid, started)

    def _sweep(self) -> None:
        """After the main process ended: end whatever of the run is left (no orphans)."""
        self._scan()
        self._find_marked()  # a helper that left the tree (a cgroup's, a marked daemon's) too: no orphans
        alive = [p for p, t in self.known.items() if process_alive(p, t)]
        if not alive:
            return
        self._signal_all(signal.SIGTERM)
        for sig, wait_s in ((signal.SIGKILL, 3.0), (None, 5.0)):  # then wait for the killed to be gone
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline and any(process_alive(p, t) for p, t in self.known.items()):
                time.sleep(0.1)
            if sig is not None:
                self._signal_all(sig)
