"""The command's own parent: ``python -m gpumon.core.runs.supervision.runner RUN_DIR``, started by the supervisor.

Training must never wait on gpumon. The supervisor is a big process (NVML, the fold, alerts, a state dir
that may hang) that can be SIGKILLed, SIGSTOPped or stuck; this small one only starts the command, drains
its output into the logs (output.py) and waits for it. Whatever state the supervisor is in:

- the command's output keeps flowing into its logs (or is dropped and counted on a full disk): a ``print``
  never waits on the supervisor;
- its exit status is written to ``exit.json`` (atomic, 0600) the moment it ends, for whoever records the
  end: the supervisor, an adopter, or any reader once both are gone.

Its job (argv, env, cwd, umask, logs) comes as one JSON line on stdin; it reports to the supervisor in JSON
lines on stdout: ``{"pid", "output_fd"}`` once the command started (or ``{"error"}``), ``{"exit_code"}``
when it ended, ``{"dropped"}`` once the logs are finished. A report nobody reads (the supervisor died) is
skipped. SIGTERM and SIGINT do not end it (they are the run's to get, not its own): it ends when the
command has ended and its output is drained.

A child subreaper: a helper the command double-forks (even with an empty environment, so without the run's
mark) re-parents to the runner, not init, so ``stop`` and the end sweep find it among the runner's
descendants (``marks.descendants``) after the supervisor died. The runner reaps such orphans while the
command runs, and once the command ended it ends those left (SIGTERM, SIGKILL after ``LEFT_GRACE_S``)
before it finishes the logs: a run's end is its main process's end, as the supervisor's sweep says.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from gpumon.core.runs.record import cgroup
from gpumon.core.safefs import read_bytes, write_atomic

EXIT_FILE = "exit.json"
DRAIN_PATIENCE_S = 10.0  # after the command ended: output of processes still holding the pipe (swept meanwhile)
LEFT_GRACE_S = 3.0  # after the command ended: SIGTERM to what it left, SIGKILL after this
FINISH_S = DRAIN_PATIENCE_S + LEFT_GRACE_S + 10.0  # how long the supervisor waits for the runner to finish the logs


def write_exit(run_dir: Path, pid: int, rc: int, **more: Any) -> bool:
    """``exit.json``: atomically and private; a run dir that is gone or full is skipped (False). ``more``:
    what the runner learnt later (the output it dropped), written over the first one."""
    fields: dict[str, Any] = {"pid": pid, "exit_code": rc, "ended": time.time(), **more}
    if rc < 0:
        with contextlib.suppress(ValueError):
            fields["signal"] = signal.Signals(-rc).name
    try:
        write_atomic(run_dir / EXIT_FILE, json.dumps(fields).encode())  # never through a link at its temporary
        return True
    except OSError:
        return False


def read_exit(run_dir: Path, pid: object) -> dict[str, Any] | None:
    """The command's exit as its runner wrote it: None when there is none for this pid (or it is unreadable)."""
    try:
        data = json.loads(read_bytes(run_dir / EXIT_FILE))  # a FIFO planted there never holds the reader
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("pid") != pid or not isinstance(data.get("exit_code"), int):
        return None
    return data


def _report(**fields: Any) -> None:
    try:
        sys.stdout.write(json.dumps(fields) + "\n")
        sys.stdout.flush()
    except (OSError, ValueError):  # the supervisor died (EPIPE): the runner goes on, reporting to nobody
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - for the life of the process


def become_subreaper() -> None:
    """Orphaned descendants re-parent to this process, not init (Linux; elsewhere a no-op)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def _wait_reaping(proc: subprocess.Popen[bytes]) -> int:
    """Wait for the command, reaping the orphans that re-parent to us meanwhile (a zombie would read alive)."""
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:  # cannot happen while the command is our child; be safe
            return proc.wait()
        if pid == proc.pid:
            proc.returncode = rc = os.waitstatus_to_exitcode(status)
            return rc


def _reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def _end_left() -> None:
    """The command ended: end every process it left under us (SIGTERM, then SIGKILL), and reap them."""
    import psutil

    me = psutil.Process()
    for sig, wait_s in ((signal.SIGTERM, LEFT_GRACE_S), (signal.SIGKILL, 2.0)):
        _reap()
        try:
            left = me.children(recursive=True)
        except psutil.Error:
            return
        if not left:
            return
        for proc in left:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            _reap()
            with contextlib.suppress(psutil.Error):
                if not me.children(recursive=True):
                    return
            time.sleep(0.05)
    _reap()


def serve(run_dir: Path) -> int:
    from gpumon.core.runs.supervision.output import PIPES_ENV, Drain

    become_subreaper()
    # A Python handler, not SIG_IGN: the command gets the default. SIGHUP too: the supervisor ignores it, and
    # an ignored signal is inherited through exec (the script ran with hang-ups ignored).
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: None)
    job = json.loads(sys.stdin.readline())
    cgroup.join(job.get("cgroup"))  # before the command starts: all it forks stays in the run's group
    env = dict(job["env"])
    drain = Drain(Path(job["logs"]), int(job["cap"]))
    if job.get("fifos"):
        drain.fifos(int(job["fifos"]))
        env[PIPES_ENV] = "1"
    log_name = str(job["log_name"])
    out, held = drain.pipe(log_name)
    try:
        proc = subprocess.Popen(
            job["argv"],
            cwd=job.get("cwd") or None,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            process_group=0,
            close_fds=True,
            pass_fds=(held,),
            umask=int(job["umask"]),  # the user's own, not the state dir's 077
        )
    except OSError as err:
        drain.note(log_name, f"gpumon: could not start {job['argv'][0]}: {err}\n")
        drain.close(0.5)
        _report(error=str(err))
        return 1
    finally:
        os.close(out)
        os.close(held)
    _report(pid=proc.pid, output_fd=held)  # its number in the child too: an adopter drains the pipe through it
    rc = _wait_reaping(proc)
    write_exit(run_dir, proc.pid, rc)
    _report(exit_code=rc)
    _end_left()
    dropped, by_log = drain.close(DRAIN_PATIENCE_S), drain.dropped_by_log()
    if by_log:  # for an adopter too (the supervisor that reads the report below may be dead): in exit.json
        from gpumon.core.runs.supervision.reserve import borrow

        if not write_exit(run_dir, proc.pid, rc, dropped_by=by_log) and borrow(run_dir):
            write_exit(run_dir, proc.pid, rc, dropped_by=by_log)
    _report(dropped=dropped, dropped_by=by_log)
    return 0


class Runner:
    """The supervisor's side: starts the runner with its job, then learns the command's pid, exit and drops."""

    def __init__(self, run_dir: Path, job: dict[str, Any]) -> None:
        self.run_dir = run_dir
        self.log_name = str(job["log_name"])
        self.drain: Any = None  # the supervisor's own drain, once the runner died under a live command
        self.reports: dict[str, Any] = {}
        self.cond = threading.Condition()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gpumon.core.runs.supervision.runner", str(run_dir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            process_group=0,  # no signal for the supervisor's group reaches it
            close_fds=True,
        )
        assert self.proc.stdin is not None
        with self.proc.stdin:
            self.proc.stdin.write(json.dumps(job).encode() + b"\n")
        threading.Thread(target=self._listen, name="runner", daemon=True).start()
        self.rc: int | None = None  # the command's exit code (None: still running, or unknown)
        self.resumed = False  # the runner was found stopped and continued
        self.ended = False

    def _listen(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(ValueError), self.cond:
                self.reports.update(json.loads(line))
                self.cond.notify_all()
        with self.cond:
            self.reports["closed"] = True
            self.cond.notify_all()

    def started(self) -> dict[str, Any]:
        """Wait for the command to start: {"pid", "output_fd"}, or {"error"} (also when the runner died)."""
        with self.cond:
            self.cond.wait_for(lambda: {"pid", "error", "closed"} & self.reports.keys())
            if "pid" not in self.reports and "error" not in self.reports:
                self.proc.wait()
                self.reports["error"] = f"gpumon's runner ended before the command started ({self.proc.returncode})"
            return dict(self.reports)

    @property
    def pid(self) -> int:
        return int(self.reports["pid"])

    def poll(self) -> bool:
        """True once the command has ended (``rc``: its exit code, None if nobody could know it)."""
        if self.ended:
            return True
        with self.cond:
            if "exit_code" in self.reports:
                self.rc, self.ended = int(self.reports["exit_code"]), True
                return True
        if self.proc.poll() is None:
            self._resume()
            return False
        # The runner died before telling: the command re-parented to us (a subreaper), or ended before.
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:  # not ours to wait for: exit.json, or unknown
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, 0)
                return False  # alive, elsewhere (no subreaper here): the marks still find it
            found = read_exit(self.run_dir, self.pid)
            self.rc, self.ended = (found["exit_code"] if found else None), True
            return True
        if pid == 0:
            self._take_over()
            return False
        self.rc, self.ended = os.waitstatus_to_exitcode(status), True
        return True

    def _resume(self) -> None:
        """A stopped runner (SIGSTOP, a debugger left attached) drains nothing: the script's print() would fill
        the pipe and wait for ever. It is gpumon's own process, never the run's: continue it, and say so."""
        from gpumon.core.runs.supervision.liveness import frozen

        if frozen(self.proc.pid):
            with contextlib.suppress(OSError):
                os.kill(self.proc.pid, signal.SIGCONT)
                if not self.resumed:
                    print(f"gpumon: the run's runner (pid {self.proc.pid}) was stopped: continued", file=sys.stderr)
                self.resumed = True

    def _take_over(self) -> None:
        """The runner died (killed) while the command runs: drain its output here, as an adopter would."""
        if self.drain is None:
            from gpumon.core.runs.supervision.output import Drain

            self.drain = Drain(self.run_dir / "logs")
            self.drain.reattach(self.pid, self.reports.get("output_fd"), self.log_name)

    def finish(self, timeout_s: float = FINISH_S) -> int:
        """After the command ended: wait (bounded) for the runner to finish the logs; the bytes it dropped."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout_s)
        ours = self.drain.close() if self.drain is not None else 0
        with self.cond:
            self.cond.wait_for(lambda: "closed" in self.reports, timeout=1.0)
            return int(self.reports.get("dropped") or 0) + ours

    def dropped_by_log(self) -> dict[str, list[int]]:
        """After ``finish``: log name -> [bytes dropped, of them not yet said in the log]."""
        found = dict(self.reports.get("dropped_by") or {})
        if self.drain is not None:
            found.update(self.drain.dropped_by_log())
        return found


if __name__ == "__main__":
    sys.exit(serve(Path(sys.argv[1])))
