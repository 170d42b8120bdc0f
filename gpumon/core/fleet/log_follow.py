"""Following one run's log on another host through one long-lived ssh: ``gpumon logs RUN --follow --lines N``.

Reading the tail again every few seconds costs an ssh handshake and a gpumon start on the host per read;
a follow costs one connection for as long as the run is followed, and bytes only when the log grows.
The host's ``gpumon logs --follow`` ends by itself once the run has ended and its log is read out (its
last line says how the run ended): the follow is then ``complete``, not failed. A failure of ssh or of
the host ends it with a ``reason`` in words; retrying is the caller's choice.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections import deque
from collections.abc import Callable, Sequence

from gpumon.core.fleet.hosts import Host, ssh_argv
from gpumon.core.fleet.link import stop_process
from gpumon.core.fleet.remote import last_line, remote_command, ssh_failure
from gpumon.core.logs.terminal import render

_MAX_LINE = 1 << 16  # a longer line is cut there: a pane shows one screen line of it anyway
_STDERR_LINES = 20


def log_words(
    run_id: str, lines: int, rank: int | None = None, launcher: bool = False, follow: bool = False
) -> list[str]:
    """``gpumon``'s words for a run's log: ``logs RUN --lines N [--rank R | --launcher] [--follow]``."""
    words = ["logs", run_id, "--lines", str(lines)]
    words += ["--launcher"] if launcher else ([] if rank is None else ["--rank", str(rank)])
    return words + (["--follow"] if follow else [])


class RemoteLogFollow:
    """Rank 0's log of ``run_id`` on ``host``, its newest ``lines`` lines kept as they come.

    ``on_change`` is called from the reader thread when lines came (or the follow ended) that the owner
    has not ``take``-n yet; it is not called again until the next ``take()``, so a chatty log costs one
    call per batch the owner handles, not one per line. It must not block (post a message and return).
    """

    def __init__(
        self, ssh: Sequence[str], host: Host, gpumon: str | Sequence[str], run_id: str, lines: int = 200,
        on_change: Callable[[], None] | None = None,
    ) -> None:  # fmt: skip
        self.host = host
        self.run_id = run_id
        self.argv = ssh_argv(list(ssh), host, [*remote_command(gpumon), *log_words(run_id, lines, follow=True)])
        self._on_change = on_change
        self._lock = threading.Lock()
        self._lines: deque[str] = deque(maxlen=max(1, lines))
        self._received = 0  # lines that came, all told
        self._taken = -1  # ``_received`` at the last take(); -1: never taken
        self._armed = True  # on_change may be called
        self._stop = threading.Event()
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None
        self.reason: str | None = None  # why the follow failed, in words
        self.complete = False  # the run ended and its log was read to the end
        self.done = False  # ended: complete, failed or stopped

    # -- for the owner --------------------------------------------------------------
    def start(self) -> RemoteLogFollow:
        self._thread = threading.Thread(target=self._run, name=f"gpumon-log-{self.host.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self, wait: bool = True) -> None:
        """End the follow and its ssh process (SIGTERM to its group, SIGKILL if it lingers). With ``wait``
        (quitting), return once no process of it is left; else the reader thread finishes that."""
        self._stop.set()
        with self._lock:
            proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)  # started with start_new_session: its pid is its group
        if wait and self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    @property
    def lines(self) -> tuple[str, ...]:
        """The newest lines, at most ``lines`` of them."""
        with self._lock:
            return tuple(self._lines)

    @property
    def received(self) -> int:
        return self._received

    @property
    def pid(self) -> int | None:
        """The ssh process, while it runs."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def take(self) -> tuple[tuple[str, ...], bool]:
        """(the lines that came since the last take, whether they replace what was shown rather than follow
        it: the first take, or more lines came than are kept). Calls ``on_change`` again from now on."""
        with self._lock:
            new = self._received - max(0, self._taken)
            replace = self._taken < 0 or new > len(self._lines)
            lines = tuple(self._lines) if replace else tuple(self._lines)[len(self._lines) - new :]
            self._taken = self._received
            self._armed = True
        return lines, replace

    # -- the reader thread ----------------------------------------------------------
    def _changed(self) -> None:
        with self._lock:
            fire, self._armed = self._armed, False
        if fire and self._on_change is not None:
            with contextlib.suppress(Exception):  # the owner's failure must not end the reader (nor print)
                self._on_change()

    def _end(self, complete: bool = False, reason: str | None = None) -> None:
        with self._lock:
            self.complete, self.reason, self.done = complete, reason, True
        self._changed()

    def _run(self) -> None:
        try:
            proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                start_new_session=True,
            )  # fmt: skip
        except OSError as err:
            self._end(reason=f"cannot start {self.argv[0]}: {err.strerror or err}")
            return
        with self._lock:
            self._proc = proc
        stderr: deque[str] = deque(maxlen=_STDERR_LINES)
        errors = threading.Thread(target=_drain, args=(proc, stderr), name="gpumon-log-stderr", daemon=True)
        errors.start()
        if self._stop.is_set():  # stop() ran before the process existed: it could not signal it
            stop_process(proc, grace=0.5)
        try:
            self._read(proc)
        finally:
            if self._stop.is_set():
                stop_process(proc)
            else:
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:  # stdout closed but ssh lingers
                    stop_process(proc, grace=0.5)
            errors.join(timeout=5)
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
        self._finish(proc.returncode, list(stderr))

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        """Lines of ssh's stdout until it closes; one ``on_change`` per read, not per line."""
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        pending = b""
        while True:
            try:
                data = os.read(fd, 1 << 16)
            except OSError:
                data = b""
            if not data:
                if pending:
                    self._add([pending])
                return
            *raw, pending = (pending + data).split(b"\n")
            if len(pending) > _MAX_LINE:
                raw.append(pending[:_MAX_LINE])
                pending = b""
            if raw:
                self._add(raw)

    def _add(self, raw: list[bytes]) -> None:
        # As the host's own tail does: a line is drawn as a terminal draws it (a progress bar: its latest frame).
        lines = [render(line.decode(errors="replace")) for line in raw]
        with self._lock:
            self._lines.extend(lines)
            self._received += len(lines)
        self._changed()

    def _finish(self, returncode: int | None, stderr: list[str]) -> None:
        if self._stop.is_set():
            self._end()
        elif returncode == 0:
            self._end(complete=True)
        else:
            failed = ssh_failure(returncode, stderr)
            if failed is not None:
                reason = f"{self.host.name}: {failed[0]}"
            else:  # the host's gpumon answered with an error of its own (a run it does not know)
                said = last_line("\n".join(stderr)).removeprefix("gpumon: ").removeprefix("error: ")
                reason = said or f"gpumon logs exited with {returncode} on {self.host.name}"
            self._end(reason=reason)


def _drain(proc: subprocess.Popen[bytes], into: deque[str]) -> None:
    """ssh's stderr (its own failures, the remote gpumon's errors): the last lines, read as they come so a
    chatty stderr never fills its pipe and stalls the host's command."""
    assert proc.stderr is not None
    with contextlib.suppress(OSError, ValueError):
        for raw in proc.stderr:
            into.append(raw.decode(errors="replace").rstrip("\n"))
