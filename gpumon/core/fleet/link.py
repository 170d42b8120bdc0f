"""One host's link: its ``gpumon snapshot --json --watch --runs N`` stream through the user's ssh.

One ssh connection per host carries its GPUs every interval and its runs when they change
(runs_delta.py). Each host has its own thread and its own ssh process, so a dead or slow host never
holds up another. The stream thread waits on the ssh process's stdout and stderr together (a selector with a
short timeout), which also lets it notice a silent stream: no line for 2 intervals is ``stale``.
When ssh ends, the reason is read from its exit status and stderr (reasons.py) and the link tries
again after 1 s, doubling to 30 s; the first good line resets the wait. ``local`` needs no ssh.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from gpumon.core.fleet.hosts import Host, ssh_argv
from gpumon.core.fleet.model import HostState
from gpumon.core.fleet.reasons import classify
from gpumon.core.fleet.runs_delta import merge_runs, ordered
from gpumon.core.fleet.stream import StreamError, decode_line

BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 30.0
STALE_INTERVALS = 2
RUNS_EVERY_S = 5.0  # the local host's runs: read in this process this often
RUNS_RECENT = 20  # ended runs read per host, besides the live ones
_MAX_LINE = 1 << 20  # a line longer than this is not ours: dropped

Publish = Callable[[HostState], None]


def stop_process(proc: subprocess.Popen[bytes] | None, grace: float = 2.0) -> None:
    """SIGTERM to the process's group (ssh and, for a stand-in, what it runs), SIGKILL after ``grace``."""
    if proc is None or proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)  # started with start_new_session: its pid is its group
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


class BaseLink:
    """The state one host's threads write and any thread reads."""

    def __init__(self, host: Host, interval: float, publish: Publish) -> None:
        self.host = host
        self.interval = interval
        self._publish = publish
        self._lock = threading.Lock()
        self._state = HostState(host, since=time.time())
        self._stop = threading.Event()
        self._poke = threading.Event()  # refresh_runs(): read the runs now (the local host)
        self._threads: list[threading.Thread] = []

    @property
    def state(self) -> HostState:
        return self._state

    def _set(self, **changes: Any) -> HostState:
        with self._lock:
            now = time.time()
            if "link" in changes and changes["link"] != self._state.link:
                changes.setdefault("since", now)
            self._state = replace(self._state, **changes)
            state = self._state
        self._publish(state)
        return state

    def _spawn(self, target: Callable[[], None], what: str) -> None:
        thread = threading.Thread(target=target, name=f"gpumon-fleet-{what}-{self.host.name}", daemon=True)
        self._threads.append(thread)
        thread.start()

    def start(self) -> None:
        raise NotImplementedError

    def refresh_runs(self) -> None:
        """Read the host's runs at once (a run was just started or stopped here), not at the next poll.
        A remote host needs no asking: its stream sends a new or ended run with its next line."""
        self._poke.set()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)
        self._threads.clear()


class HostLink(BaseLink):
    """A host reached through ssh."""

    def __init__(
        self,
        host: Host,
        ssh: Sequence[str],
        gpumon: Sequence[str],
        interval: float,
        publish: Publish,
        fields: str = "fleet",
        runs_every: float = RUNS_EVERY_S,
        recent: int = RUNS_RECENT,
    ) -> None:
        super().__init__(host, interval, publish)
        self.ssh = list(ssh)
        self.gpumon = list(gpumon)
        self.fields = fields
        self.runs_every = runs_every  # 0: no runs asked for (only a positive value matters for a remote host)
        self.recent = recent
        self._proc: subprocess.Popen[bytes] | None = None  # the stream's ssh process, while one runs
        self._runs: dict[str, dict[str, Any]] = {}  # id -> row, as the stream's runs deltas left them

    @property
    def pid(self) -> int | None:
        """The stream's ssh process, while one runs."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def start(self) -> None:
        self._spawn(self._stream_loop, "stream")

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            proc = self._proc
        stop_process(proc)
        super().stop()

    def argv(self, remote: list[str]) -> list[str]:
        """The argv that runs ``gpumon REMOTE`` on the host (a subclass may reach it another way: srun)."""
        return ssh_argv(self.ssh, self.host, [*self.gpumon, *remote])

    def env(self) -> dict[str, str] | None:
        """The environment of that argv (None: this process's)."""
        return None

    def classify(self, returncode: int | None, stderr: list[str]) -> tuple[str, str | None]:
        """Why the stream ended, in words, and the line it came from."""
        return classify(returncode, stderr)

    def _popen(self, remote: list[str]) -> subprocess.Popen[bytes] | None:
        proc = subprocess.Popen(
            self.argv(remote),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env=self.env(),
        )
        with self._lock:
            self._proc = proc
            stopping = self._stop.is_set()
        if stopping:  # stop() ran between the check and the start: it could not see this one
            stop_process(proc, grace=0.5)
            return None
        return proc

    # -- the snapshot stream ------------------------------------------------------
    def _stream_loop(self) -> None:
        backoff = BACKOFF_FIRST_S
        while not self._stop.is_set():
            got_line = self._stream_once()
            if self._stop.is_set():
                break
            if got_line:
                backoff = BACKOFF_FIRST_S
            self._set(retry_at=time.time() + backoff)
            self._stop.wait(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX_S)
            self._set(retry_at=None)

    def _stream_once(self) -> bool:
        """Run one ssh stream until it ends; True if it gave at least one good line."""
        remote = ["snapshot", "--json", "--watch", "--interval", f"{self.interval:g}", "--fields", self.fields]
        if self.runs_every > 0:
            remote += ["--runs", str(self.recent)]
        try:
            proc = self._popen(remote)
        except OSError as err:
            self._set(link="down", reason=f"cannot start {self.ssh[0]}: {err.strerror or err}", detail=None)
            return False
        if proc is None:
            return False
        stderr: deque[str] = deque(maxlen=20)
        got, mismatch = self._read(proc, stderr)
        if mismatch is not None:
            stop_process(proc, grace=0.5)
        else:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:  # both pipes closed but ssh lingers
                stop_process(proc, grace=0.5)
        for pipe in (proc.stdout, proc.stderr):  # now, not when the Popen is collected: retries must not pile up fds
            if pipe is not None:
                pipe.close()
        returncode = proc.returncode
        if not self._stop.is_set():
            if mismatch is not None:
                reason, detail = mismatch, None
            elif got and returncode == 0 and not stderr:
                reason, detail = "gpumon stopped streaming on the host", None
            else:
                reason, detail = self.classify(returncode, list(stderr))
            self._set(link="down", reason=reason, detail=detail)
        return got

    def _read(self, proc: subprocess.Popen[bytes], stderr: deque[str]) -> tuple[bool, str | None]:
        """Lines until both pipes close (or a mismatch, or stop); (any good line, mismatch reason or None)."""
        assert proc.stdout is not None and proc.stderr is not None
        selector = selectors.DefaultSelector()
        pending = {proc.stdout.fileno(): b"", proc.stderr.fileno(): b""}
        out_fd = proc.stdout.fileno()
        for fd in pending:
            os.set_blocking(fd, False)
            selector.register(fd, selectors.EVENT_READ)
        got = False
        last = time.monotonic()
        try:
            while selector.get_map() and not self._stop.is_set():
                # Wake on a line, on the end of the stream (stop() ends ssh, which closes both pipes), and
                # when a live stream turns stale (2 intervals after its last line): no polling in between.
                timeout = None
                if self._state.link == "live":
                    timeout = max(0.005, last + STALE_INTERVALS * self.interval - time.monotonic())
                for key, _ in selector.select(timeout=timeout):
                    fd = int(key.fd)
                    try:
                        data = os.read(fd, 1 << 16)
                    except BlockingIOError:
                        continue
                    if not data:
                        selector.unregister(fd)
                        continue
                    *lines, pending[fd] = (pending[fd] + data).split(b"\n")
                    if len(pending[fd]) > _MAX_LINE:
                        pending[fd] = b""
                    for raw in lines:
                        if fd != out_fd:
                            stderr.append(raw.decode(errors="replace"))
                            continue
                        try:
                            self._line(raw)
                        except StreamError as err:
                            if str(err).startswith("version mismatch"):
                                return got, str(err)
                            continue  # a stray line (a login script's echo): not ours, not fatal
                        got = True
                        last = time.monotonic()
                if self._state.link == "live" and time.monotonic() - last >= STALE_INTERVALS * self.interval:
                    self._set(link="stale")
        finally:
            selector.close()
        return got, None

    def _line(self, raw: bytes) -> None:
        doc = decode_line(raw)
        now = time.time()
        sent = doc.get("sent")
        # One way, sample written to line read: exact on one machine, as good as NTP between two.
        latency = max(0.0, (now - sent) * 1000) if isinstance(sent, (int, float)) else None
        changes: dict[str, Any] = {}
        runs = doc.pop("runs", None)
        if isinstance(runs, dict):
            self._runs, error = merge_runs(self._runs, runs)
            changes = {"runs_reason": error} if error else {"runs": ordered(self._runs), "runs_reason": None}
            changes["runs_at"] = now
        changes.update(link="live", reason=None, detail=None, snapshot=doc, latency_ms=latency)
        self._set(version=doc.get("version"), **changes)
