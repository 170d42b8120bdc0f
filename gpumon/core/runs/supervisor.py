"""The process that owns one run: ``python -m gpumon.core.runs.supervisor RUN_DIR``.

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
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

import psutil

from gpumon.core.events import EventWriter
from gpumon.core.runs.launcher import STOP_GRACE_S
from gpumon.core.runs.store import process_alive, read_json, write_json

_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):.*?rank\s*:\s*(\d+)", re.S)


def root_cause(run_dir: Path) -> dict[str, Any] | None:
    """The failing rank and message from torchrun's error file and its console report, if any."""
    data = read_json(run_dir / "error.json")
    message: Any = data.get("message")
    error: dict[str, Any] = {}
    if isinstance(message, dict):
        error["message"] = str(message.get("message", ""))
        extra = message.get("extraInfo") or {}
        if isinstance(extra, dict) and extra.get("py_callstack"):
            error["traceback"] = str(extra["py_callstack"])[-8000:]
        if "errorCode" in message:
            error["exit_code"] = message["errorCode"]
    elif isinstance(message, str):
        error["message"] = message
    try:
        console = (run_dir / "logs" / "launcher.log").read_text(errors="replace")[-20000:]
    except OSError:
        console = ""
    found = _ROOT_CAUSE.search(console)
    if found:
        error["rank"] = int(found.group(1))
    return error or None


class Supervisor:
    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.command = read_json(run_dir / "command.json")
        self.status = read_json(run_dir / "status.json")
        self.events = EventWriter(run_dir, "launcher")
        self.proc: subprocess.Popen[bytes] | None = None
        self.known: dict[int, float] = {}  # descendant pid -> start time
        self.stop_at: float | None = None  # when SIGKILL follows a requested stop
        self.outcome: str | None = None  # "stopped" / "killed" once asked

    def save(self, **fields: Any) -> None:
        self.status.update(fields)
        write_json(self.run_dir / "status.json", self.status)

    def run(self) -> int:
        _become_subreaper()
        me = psutil.Process()
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGUSR1, self._on_kill)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        argv = [str(a) for a in self.command["argv"]]
        env = {**os.environ, **{str(k): str(v) for k, v in self.command.get("env", {}).items()}}
        log_name = "launcher.log" if env.get("GPUMON_TORCHRUN") else "rank0.log"
        base = {"supervisor_pid": me.pid, "supervisor_create_time": me.create_time()}
        with open(self.run_dir / "logs" / log_name, "ab") as out:
            try:
                self.proc = subprocess.Popen(
                    argv,
                    cwd=self.command.get("cwd") or None,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    process_group=0,
                    close_fds=True,
                )
            except OSError as err:
                out.write(f"gpumon: could not start {argv[0]}: {err}\n".encode())
                self.save(**base, state="failed", started=time.time(), ended=time.time(), error={"message": str(err)})
                self.events.write("run_end", state="failed", exit_code=None, error={"message": str(err)})
                return 1
        child = self.proc.pid
        try:
            child_start = psutil.Process(child).create_time()
        except psutil.Error:
            child_start = None
        self.save(**base, state="running", pid=child, pgid=child, pid_create_time=child_start, started=time.time())
        self.events.write("run_start", argv=argv, pid=child, cwd=self.command.get("cwd"))
        rc = self._wait()
        self._sweep()
        return self._finish(rc)

    def _wait(self) -> int:
        assert self.proc is not None
        last_scan = 0.0
        while True:
            rc = self.proc.poll()
            if rc is not None:
                return rc
            now = time.monotonic()
            if now - last_scan >= 1.0:
                self._scan()
                last_scan = now
            if self.stop_at is not None and now >= self.stop_at:
                self._signal_all(signal.SIGKILL)
                self.outcome = "killed"
                self.stop_at = None
            time.sleep(0.1)

    def _scan(self) -> None:
        """Remember every descendant: torchrun's workers leave our process group."""
        try:
            for proc in psutil.Process(os.getpid()).children(recursive=True):
                try:
                    self.known.setdefault(proc.pid, proc.create_time())
                except psutil.Error:
                    continue
        except psutil.Error:
            pass

    def _signal_all(self, sig: signal.Signals) -> None:
        self._scan()
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, sig)
        for pid, started in list(self.known.items()):
            try:
                proc = psutil.Process(pid)
                if abs(proc.create_time() - started) < 0.5:
                    proc.send_signal(sig)
            except psutil.Error:
                self.known.pop(pid, None)

    def _on_stop(self, signum: int, frame: FrameType | None) -> None:
        if self.outcome is None:
            self.outcome = "stopped"
            grace = float(self.command.get("grace_s", STOP_GRACE_S))
            self.stop_at = time.monotonic() + grace
            self.save(state="stopping", stop_requested=time.time())
            self.events.write("run_stop", mode="term", grace_s=grace)
            self._signal_all(signal.SIGTERM)

    def _on_kill(self, signum: int, frame: FrameType | None) -> None:
        self.outcome = "killed"
        self.stop_at = None
        self.events.write("run_stop", mode="kill")
        self._signal_all(signal.SIGKILL)

    def _sweep(self) -> None:
        """After the main process ended: end whatever of the run is left (no orphans)."""
        self._scan()
        alive = [p for p, t in self.known.items() if process_alive(p, t)]
        if not alive:
            return
        self._signal_all(signal.SIGTERM)
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and any(process_alive(p, t) for p, t in self.known.items()):
            time.sleep(0.1)
        self._signal_all(signal.SIGKILL)

    def _finish(self, rc: int) -> int:
        error = root_cause(self.run_dir) if rc != 0 else None
        state = self.outcome or ("finished" if rc == 0 else "failed")
        fields: dict[str, Any] = {"state": state, "exit_code": rc, "ended": time.time()}
        if rc < 0:
            fields["signal"] = signal.Signals(-rc).name
        if error:
            fields["error"] = error
        self.save(**fields)
        self.events.write("run_end", **{k: v for k, v in fields.items() if k != "ended"})
        if state == "failed" and read_json(self.run_dir / "spec.json").get("oom_retry"):
            self._retry_after_oom()
        return 0

    def _retry_after_oom(self) -> None:
        """--oom-retry: an out-of-memory failure starts this run again with half the batch size."""
        from dataclasses import replace

        from gpumon.core.doctor.evidence import run_failure
        from gpumon.core.gpu import visible_gpu_count
        from gpumon.core.runs.launcher import launch
        from gpumon.core.runs.retry import OOM_KINDS, halved
        from gpumon.core.runs.store import RunStore
        from gpumon.core.runs.telemetry import RunTelemetry

        store = RunStore(self.run_dir.parent.parent)
        record = store.load(self.run_dir)
        if record is None:
            return
        telemetry = RunTelemetry(self.run_dir)
        telemetry.update()
        failure = run_failure(record, telemetry)
        if failure is None or failure.kind not in OOM_KINDS:
            return
        plan = halved(record.spec)
        if plan is None:
            self.events.write("note", text=f"{failure.title} at batch size 1: no smaller batch to retry with")
            return
        spec, old, new = plan
        try:
            retry = launch(replace(spec, retry_of=record.id), store, visible_gpu_count(), wait_s=0)
        except (OSError, ValueError) as err:
            self.events.write("note", text=f"out of memory at batch size {old}; the retry did not start: {err}")
            return
        self.save(retried_as=retry.id)
        self.events.write("note", text=f"out of memory at batch size {old}: retrying as {retry.id} with {new}")


def _become_subreaper() -> None:
    """Orphaned descendants (workers whose torchrun died) re-parent to us, not init, so we still see them."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER (Linux)
    except (OSError, AttributeError):
        pass


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m gpumon.core.runs.supervisor RUN_DIR", file=sys.stderr)
        return 2
    return Supervisor(Path(argv[0])).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
