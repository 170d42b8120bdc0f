"""One host's link: its ``gpumon snapshot --json --watch`` stream through the user's ssh, and its runs.

Each host has its own threads and its own ssh processes, so a dead or slow host never holds up
another. The stream thread waits on the ssh process's stdout and stderr together (a selector with a
short timeout), which also lets it notice a silent stream: no line for 2 intervals is ``stale``.
When ssh ends, the reason is read from its exit status and stderr (reasons.py) and the link tries
again after 1 s, doubling to 30 s; the first good line resets the wait. ``local`` needs no ssh.
"""

from __future__ import annotations

import contextlib
import json
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
from gpumon.core.fleet.stream import StreamError, decode_line
from gpumon.core.runs.store import LIVE_STATES

BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 30.0
STALE_INTERVALS = 2
RUNS_EVERY_S = 5.0
RUNS_IDLE_FACTOR = 6  # a host with no live run and the same GPU processes: its runs every 30 s
RUNS_RECENT = 20  # ended runs read per host, besides the live ones
RUNS_TIMEOUT_S = 30.0
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
        self._poke = threading.Event()  # refresh_runs(): read the runs now
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
        """Read the host's runs at once (a run was just started or stopped there), not at the next poll."""
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
        self.runs_every = runs_every
        self.recent = recent
        self._procs: dict[str, subprocess.Popen[bytes]] = {}  # "stream" / "runs": the ssh process running now
        self._reachable = threading.Event()  # set while the stream is live or stale: runs are worth reading

    @property
    def pid(self) -> int | None:
        """The stream's ssh process, while one runs."""
        proc = self._procs.get("stream")
        return proc.pid if proc is not None and proc.poll() is None else None

    def start(self) -> None:
        self._spawn(self._stream_loop, "stream")
        if self.runs_every > 0:
            self._spawn(self._runs_loop, "runs")

    def stop(self) -> None:
        self._stop.set()
        self._reachable.set()  # wakes the runs thread
        self._poke.set()
        with self._lock:
            procs = list(self._procs.values())
        for proc in procs:
            stop_process(proc)
        super().stop()

    def _popen(self, kind: str, remote: list[str]) -> subprocess.Popen[bytes] | None:
        argv = ssh_argv(self.ssh, self.host, [*self.gpumon, *remote])
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
        )
        with self._lock:
            self._procs[kind] = proc
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
            self._reachable.clear()
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
        try:
            proc = self._popen("stream", remote)
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
                reason, detail = classify(returncode, list(stderr))
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
                # Wake exactly when a live stream turns stale (2 intervals after its last line), else twice
                # a second to notice stop(); a line or the end of the stream wakes it sooner.
                timeout = 0.5
                if self._state.link == "live":
                    timeout = min(timeout, max(0.005, last + STALE_INTERVALS * self.interval - time.monotonic()))
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
        self._set(link="live", reason=None, detail=None, snapshot=doc, latency_ms=latency, version=doc.get("version"))
        self._reachable.set()

    # -- runs -----------------------------------------------------------------------
    def _runs_loop(self) -> None:
        read_pids: frozenset[int] = frozenset()
        while not self._stop.is_set():
            if not self._reachable.wait(timeout=1.0) or self._stop.is_set():
                continue
            if self._runs_due(read_pids):
                self._poke.clear()
                read_pids = _gpu_pids(self._state)
                self._read_runs()
            self._poke.wait(min(1.0, self.runs_every))

    def _runs_due(self, read_pids: frozenset[int]) -> bool:
        """Every ``runs_every`` while the host has a live run or its GPU processes changed since the last
        read; else every ``RUNS_IDLE_FACTOR`` times that: each read starts a gpumon on the host."""
        state = self._state
        if state.runs_at is None or self._poke.is_set():
            return True
        age = time.time() - state.runs_at
        if age >= self.runs_every * RUNS_IDLE_FACTOR:
            return True
        live = any(row.get("status") in LIVE_STATES for row in state.runs)
        return age >= self.runs_every and (live or _gpu_pids(state) != read_pids)

    def _read_runs(self) -> None:
        try:
            proc = self._popen("runs", ["runs", "--json", "--recent", str(self.recent)])
        except OSError as err:
            self._set(runs_reason=f"cannot start {self.ssh[0]}: {err.strerror or err}")
            return
        if proc is None:
            return
        try:
            out, errors = proc.communicate(timeout=RUNS_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            stop_process(proc, grace=0.5)
            self._set(runs_reason=f"gpumon runs took over {RUNS_TIMEOUT_S:g} s")
            return
        if self._stop.is_set():
            return
        if proc.returncode != 0:
            self._set(runs_reason=classify(proc.returncode, errors.decode(errors="replace").splitlines())[0])
            return
        try:
            rows = json.loads(out)["runs"]
            if not isinstance(rows, list):
                raise TypeError("runs is not a list")
        except (ValueError, KeyError, TypeError) as error:
            self._set(runs_reason=f"gpumon runs --json printed no runs list ({error})")
            return
        self._set(runs=tuple(r for r in rows if isinstance(r, dict)), runs_reason=None, runs_at=time.time())


def _gpu_pids(state: HostState) -> frozenset[int]:
    return frozenset(p.get("pid") for p in (state.snapshot or {}).get("processes", []) if isinstance(p.get("pid"), int))
