"""The process that owns one run: ``python -m gpumon.core.runs.supervision.supervisor RUN_DIR``.

Started detached by the launcher. It starts the command in its own process
group, records pids and the exit in status.json and launcher events, stops
the run on SIGTERM (SIGTERM to everything, SIGKILL after the grace period)
or kills it on SIGUSR1, and leaves no process of the run behind: torchrun
puts each worker in a new session, so descendants are tracked by pid and
start time, not only by process group.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

import psutil

from gpumon.core.alerts.outbox import settings_or_error
from gpumon.core.doctor.allocator_warnings import findings as allocator_findings
from gpumon.core.doctor.allocator_warnings import said
from gpumon.core.doctor.leak import LeakWatch, record_states
from gpumon.core.doctor.oom_evidence import oom_kill_count
from gpumon.core.events import EventWriter
from gpumon.core.placement.places import of_files
from gpumon.core.protocol import CENSUS_FLAG, CONTROL_DIR
from gpumon.core.runs.reading.telemetry import RunTelemetry, save_summary
from gpumon.core.runs.record import cgroup
from gpumon.core.runs.record.store import read_json, write_json
from gpumon.core.runs.supervision.alerts import loss_alert, loss_fix, raise_alert, restart_alert, slow_alert
from gpumon.core.runs.supervision.census_ask import CensusAsk
from gpumon.core.runs.supervision.end_alerts import end_alert
from gpumon.core.runs.supervision.ending import DELETED, compress, end_fields, index_run, retry_after_oom
from gpumon.core.runs.supervision.gpu_idle import GpuIdleCheck
from gpumon.core.runs.supervision.launcher import STOP_GRACE_S
from gpumon.core.runs.supervision.leak_alert import LeakAlert
from gpumon.core.runs.supervision.output import log_cap_kept
from gpumon.core.runs.supervision.reserve import reserve, write_end
from gpumon.core.runs.supervision.runner import Runner, become_subreaper
from gpumon.core.runs.supervision.stall import StallWatch, tidy
from gpumon.core.runs.supervision.tracking import Tracking
from gpumon.core.runs.supervision.worker_exits import WorkerExits
from gpumon.core.safefs import open_own

END_PATIENCE_S = 24 * 3600.0  # how long a supervisor waits for disk space to write its run's end
TUNE_INT_S = 8.0  # a Tune driver gets this long after SIGINT (it needs ~5 s) before SIGTERM
SUMMARY_EVERY_S = 2.0  # how often the run's summary.json catches up with its events (readers reload it then)


class Supervisor(Tracking):
    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.command = read_json(run_dir / "command.json")
        self.status = read_json(run_dir / "status.json")
        self.events = EventWriter(run_dir, "launcher")
        self.child: Runner | None = None  # the command, through its runner (None: an adopted run)
        self.known: dict[int, float] = {}  # descendant pid -> start time
        self.stop_at: float | None = None  # when SIGKILL follows a requested stop
        self.term_at: float | None = None  # a search asked to stop with SIGINT: when SIGTERM follows
        self.outcome: str | None = None  # "stopped" / "killed" once asked
        self.stop_asked = False  # a stop came: _wait sends it (SIGINT to a search, SIGTERM to the rest)
        # The run's events folded as they come, with the doctor's leak watch: summary.json for every reader.
        self.watch = LeakWatch()
        self.fold = RunTelemetry(run_dir, use_summary=False, watch=self.watch)
        self.spec = read_json(run_dir / "spec.json")  # read once: the census, alert, stop and retry choices use it
        self.place = of_files(self.spec, self.status)  # where it lives: its start and end in its place's words
        self.census = not self.spec.get("no_census")
        self.census_ask = CensusAsk()  # when memory grows; wider apart when a census saw nothing grow (census_ask.py)
        self.leak_alert = LeakAlert(census=self.census)  # sent once, with the census's cause (leak_alert.py)
        self.loss_alerted = False
        self.slow_alerted: set[str] = set()  # the slow kinds alerted: once per run, the doctor keeps saying them
        self.gpus = GpuIdleCheck()  # ranks holding GPU memory on an idle GPU (gpu_idle.py)
        self.stalls = StallWatch()  # ranks that stop stepping: state stalled, their stacks, one alert (stall.py)
        # torchrun's line naming the worker that failed first (a killed rank says nothing itself): worker_exits.py
        self.exits = WorkerExits(run_dir) if self.command.get("env", {}).get("GPUMON_TORCHRUN") else None
        self.summary_error: str | None = None
        self.dropped: dict[str, list[int]] = {}  # log name -> [bytes lost to a full disk, of them unsaid]
        self.unsaved: str | None = None  # why status.json could not be written (ENOSPC); retried
        self._lock_fd: int | None = None
        self.ending = False  # the command ended: what is left is writing its end
        self.quit = False  # SIGTERM while ending: stop waiting to write it
        self.umask = os.umask(0o077)  # every file gpumon writes in the state dir: 0600

    def save(self, **fields: Any) -> bool:
        """Write status.json; on a full disk keep it here and say so (``flush`` writes it when space returns)."""
        self.status.update(fields)
        try:
            write_json(self.run_dir / "status.json", self.status)
        except OSError as err:
            self.unsaved = str(err)
            return False
        self.unsaved = None
        return True

    def flush(self, patience_s: float = END_PATIENCE_S) -> None:
        """The run ended but its end could not be written (a full disk): retry until it can, or give up: at
        SIGTERM, or once the run's directory is gone (deleted: no space will bring it back)."""
        deadline = time.monotonic() + patience_s
        while self.unsaved is not None and time.monotonic() < deadline and not self.quit:
            next_try = time.monotonic() + 2.0
            while time.monotonic() < next_try and not self.quit:
                time.sleep(0.1)
            if self.quit or self.deleted():
                return
            if self.save():
                self.summarise(final=True)

    def deleted(self) -> bool:
        """The run's directory was deleted (a new process of the run may have made its events/ again)."""
        return not (self.run_dir / "spec.json").exists() and not (self.run_dir / "status.json").exists()

    def run(self) -> int:
        if not self._lock():
            return 0  # another supervisor has the run
        become_subreaper()  # orphaned workers (their torchrun died) re-parent to us, not init: still seen
        reserve(self.run_dir)  # room kept for the run's end on a state dir that fills (reserve.py)
        me = psutil.Process()
        self._handle_signals()
        argv = [str(a) for a in self.command["argv"]]
        env = {**os.environ, **{str(k): str(v) for k, v in self.command.get("env", {}).items()}}
        log_name = "launcher.log" if env.get("GPUMON_TORCHRUN") else "rank0.log"
        base = {"supervisor_pid": me.pid, "supervisor_create_time": me.create_time(), **self.place.started()}
        # The command's parent is a small runner (runner.py): it drains the output and records the exit, so a
        # killed, stopped or hung supervisor never blocks a print() nor loses the exit code.
        job = {"argv": argv, "env": env, "cwd": self.command.get("cwd"), "umask": self.umask, "log_name": log_name}
        group, no_group = cgroup.make(self.run_dir.name)  # the runner joins it before it starts the command
        base |= {"cgroup": group} if group else {"cgroup_why": no_group}
        cap, why = log_cap_kept()  # config.toml broken since the launch checked it: the default, said
        if why:
            self.events.write("note", text=why)
        settings_or_error()  # the alert channels as at the start: kept if config.toml breaks under the run
        job |= {"logs": str(self.run_dir / "logs"), "cap": cap, "cgroup": group}
        if env.get("GPUMON_RANK_LOGS"):
            job["fifos"] = int(self.spec.get("nproc") or 1)
        try:
            self.child = runner = Runner(self.run_dir, job)
            started = runner.started()
        except OSError as err:
            started = {"error": str(err)}
        if "error" in started:
            error = {"message": started["error"]}
            self.save(**base, state="failed", started=time.time(), ended=time.time(), error=error)
            self.events.write("run_end", state="failed", exit_code=None, error=error)
            return 1
        child = runner.pid
        base |= {"runner_pid": runner.proc.pid, "runner_create_time": _started(runner.proc.pid)}
        child_start = _started(child)
        oom = {"start": oom_kill_count()}  # the run shares our cgroup: a rise by its end shows an OOM kill in it
        base["output_fd"] = started["output_fd"]  # an adopter drains the pipe through it if the runner died
        self.save(**base, state="running", pid=child, pgid=child, pid_create_time=child_start, started=time.time())
        self.events.write("run_start", argv=argv, pid=child, cwd=self.command.get("cwd"))
        rc = self._wait()
        self.ending = True  # a stop now ends the wait for disk space, not the run (it ended)
        self._sweep()
        if dropped := runner.finish():
            self.events.write("note", text=f"{dropped} bytes of the run's output were lost to a full state dir")
            self.dropped = runner.dropped_by_log()
            self.status["output_dropped"] = {name: n[0] for name, n in self.dropped.items()}
        if oom["start"] is not None:
            self.status["oom_kill"] = {**oom, "end": oom_kill_count()}
        return self._finish(rc)

    def _lock(self) -> bool:
        """Hold supervisor.lock for life: the kernel drops it when we die, however we die, so an adopter
        knows for sure whether the run still has a supervisor."""
        import fcntl

        fd = open_own(self.run_dir / "supervisor.lock", os.O_RDWR)  # never through a link planted there
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._lock_fd = fd
        return True

    def _handle_signals(self) -> None:
        """SIGTERM/SIGINT: stop the run (grace, then SIGKILL); SIGUSR1: kill it now; a hang-up is not ours."""
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGUSR1, self._on_kill)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    def adopt(self) -> int:
        """Watch a run whose supervisor died: record its end and summarise it; stop it when asked (adopt.py)."""
        from gpumon.core.runs.supervision.adopt import adopt

        return adopt(self)

    def _wait(self) -> int | None:
        assert self.child is not None
        last_scan = last_summary = 0.0
        while True:
            if self.child.poll():
                return self.child.rc
            if self.stop_asked:
                self._stop_command()
            now = time.monotonic()
            if now - last_scan >= 1.0:
                self._scan()
                last_scan = now
            if now - last_summary >= SUMMARY_EVERY_S:
                self.summarise()
                self.stalls.check(self)
                if self.unsaved is not None:
                    self.save()
                last_summary = now
            if self.term_at is not None and now >= self.term_at:
                self._signal_all(signal.SIGTERM)
                self.term_at = None
            if self.stop_at is not None and now >= self.stop_at:
                self._signal_all(signal.SIGKILL)
                self.outcome = "killed"
                self.stop_at = None
            time.sleep(0.1)

    def summarise(self, final: bool = False) -> None:
        """Fold the new events, ask for a census when memory grows (census_ask.py), raise what alarms, save
        summary.json."""
        try:
            if self.exits is not None:  # before the fold: a restart's alert names the rank torchrun named
                self.exits.poll(self.events)
            changed = self.fold.update()
            states = self.watch.update(self.fold)  # judged against the run's expected end (doctor/horizon.py)
        except OSError as err:  # a full disk: training goes on; the summary catches up when it can
            self.summary_error = str(err)
            return
        raised = False
        loss = None if self.loss_alerted else loss_alert(self.fold)
        if loss is not None:
            self.loss_alerted = raised = True  # once per run (loss_alert also sees an earlier supervisor's)
            self.alert(loss, "nan", **loss_fix(self.fold))  # the doctor's first fix, whole
        self.gpus.report(time.monotonic(), self.fold.pids, self.events, self.alert)
        restart = restart_alert(self.fold, int(self.spec.get("max_restarts") or 0))
        if restart is not None:  # torchrun started the ranks again: said at once, with what failed
            raised = True
            self.alert(restart, "restart")
        for kind in ("input_bound", "straggler"):
            slow = None if kind in self.slow_alerted else slow_alert(self.fold, kind)
            if slow is not None:
                self.slow_alerted.add(kind)
                raised = True
                self.alert(slow[0], kind, **slow[1])
        for kind, text, fix in allocator_findings(self.fold.allocator):  # before an OOM (allocator_warnings.py)
            if kind not in self.slow_alerted and not said(kind, self.fold.alerts):  # once per run
                self.slow_alerted.add(kind)
                raised = True
                self.alert(text, kind, fix=fix)
        if self.census:  # before the alert: it waits for a census asked for
            self.census_ask.ask(self.run_dir, states, self.fold.census, self.events)
        leak = self.leak_alert.due(states, self.fold, final, self.census_ask.pending(self.fold.census))
        if leak is not None:
            raised = True
            self.alert(leak[0], "leak", **leak[1])
        try:
            if raised:  # the alert events into this summary: a final one has no pass after it
                changed += self.fold.update()
            if changed or final:
                self.fold.recorded_leaks = record_states(self.watch)
                save_summary(self.fold, final)
            self.summary_error = None
        except OSError as err:
            self.summary_error = str(err)

    def alert(self, text: str, kind: str, **fields: Any) -> None:
        on_alert = tuple(str(a) for a in self.spec.get("on_alert") or ())
        raise_alert(self.run_dir, self.events, text, on_alert, kind, **fields)

    def _on_stop(self, signum: int, frame: FrameType | None) -> None:
        if self.ending:
            self.quit = True
            return
        if self.outcome is None:
            self.outcome = "stopped"
            self.stop_at = time.monotonic() + float(self.command.get("grace_s", STOP_GRACE_S))
            self.save(state="stopping", stop_requested=time.time())
            self.stop_asked = True
            if self.child is None:  # adopted: no driver of a search to ask; nothing folds in this handler
                self._stop_command()

    def _stop_command(self) -> None:
        """The stop asked in _on_stop, sent from _wait's loop: a signal handler must not fold events (it may have
        cut into a fold), and the Tune events a search wrote a moment ago decide how it is stopped."""
        self.stop_asked = False
        grace = float(self.command.get("grace_s", STOP_GRACE_S))
        if self.child is not None:
            with contextlib.suppress(OSError):  # a full disk: judged on the events folded so far
                self.fold.update()
            # A search (gpumon's own, or a user's Tune script whose callback's events came) ends on SIGINT as on
            # ctrl+c: Tune stops its trials and saves the experiment (~5 s); SIGTERM follows if it hangs.
            if self.spec.get("kind") == "tune" or self.fold.tune is not None:
                self.term_at = time.monotonic() + min(TUNE_INT_S, grace / 2)
                self.events.write("run_stop", mode="int", grace_s=grace)
                with contextlib.suppress(OSError):
                    os.kill(self.child.pid, signal.SIGINT)
                return
        self.events.write("run_stop", mode="term", grace_s=grace)
        self._signal_all(signal.SIGTERM)

    def _on_kill(self, signum: int, frame: FrameType | None) -> None:
        if self.ending:
            self.quit = True
            return
        self.outcome = "killed"
        self.stop_at = self.term_at = None
        self.stop_asked = False
        self.save(state="stopping", stop_requested=time.time())  # the answer `gpumon stop --kill` waits for
        self.events.write("run_stop", mode="kill")
        self._signal_all(signal.SIGKILL)

    def _finish(self, rc: int | None) -> int:
        self.ending = True
        if self.deleted():  # its end kept in the state dir's index, with why nothing else of it is left
            fields = {**end_fields(self.run_dir, rc, self.outcome, self.fold.exceptions), "deleted": True}
            status = {**self.status, **fields, "error": {"message": DELETED}}
            index_run(self.run_dir, status, self.fold, self.watch, self.events, self.spec)
            cgroup.remove(status.get("cgroup"))
            return 0
        fields = end_fields(self.run_dir, rc, self.outcome, self.fold.exceptions)
        state, error = fields["state"], fields.get("error")
        fields["state"] = state = self.place.ended(self.run_dir, state, fields)  # a job's: in Slurm's words
        self.status.update(fields)
        self.events.write("run_end", **{k: v for k, v in fields.items() if k != "ended"})
        ending = end_alert(self.run_dir, self.spec, self.status, self.fold, rc, error)
        if ending is not None:
            self.alert(ending[0], ending[1], state=state, **ending[2])
        if state == "failed" and self.spec.get("oom_retry"):
            retry_after_oom(self.run_dir, self.status, self.fold, self.events)
        with contextlib.suppress(OSError):  # a census nobody will answer now: not left pending for good
            (self.run_dir / CONTROL_DIR / CENSUS_FLAG).unlink()
        self.summarise(final=True)  # before the end state: whoever reads the end reads the whole summary
        self.stalls.settle(self)
        tidy(self.run_dir)  # the empty stack files of processes that never dumped
        cgroup.remove(self.status.get("cgroup"))  # empty now: its processes were swept, the runner is done
        write_end(self)  # in the room the reserve gives back on a full disk (reserve.py)
        index_run(self.run_dir, self.status, self.fold, self.watch, self.events)
        self.place.freed(self.run_dir, self.events)  # wakes the queue's keeper for the runs it may now start
        compress(self)
        return 0


def _started(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def main(argv: list[str]) -> int:
    from gpumon.core.alerts.delivery import DELIVERER

    if len(argv) == 2 and argv[0] == "--adopt":
        rc = Supervisor(Path(argv[1])).adopt()
    elif len(argv) != 1:
        print("usage: python -m gpumon.core.runs.supervision.supervisor [--adopt] RUN_DIR", file=sys.stderr)
        return 2
    else:
        rc = Supervisor(Path(argv[0])).run()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the run has ended: a stop now ends this wait, not a run
    DELIVERER.drain()  # alerts still trying get a bounded time (delivery.DRAIN_S), then are recorded as given up
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
