"""Start-to-first-full-frame of the gpumon TUI in a real terminal (tmux).

Each run launches ``gpumon --simulate 2`` in a fresh detached tmux session of
100x30 and polls ``tmux capture-pane -p`` about every 10 ms until the pane shows
a full frame: the "SIMULATED" tag, the host panel's "cores", GPU 0's "UTIL"
line and the simulated process PID 5000000. Then it presses "q", waits for the
app to exit and kills the session. The app runs under a one-line ``sh -c``
wrapper that writes its exit status to a file (a millisecond or two of the
measured time), so a quit that is not clean is reported.

The tmux server runs on a socket of its own (``-L``) with ``-f /dev/null``, so
no user configuration and no other tmux session is touched. A placeholder
session keeps that server alive across runs, so tmux's own start is paid once,
outside the timings.

Usage: python bench/startup.py [--runs 10]

The tmux helpers here are also used by bench/idle_cpu.py.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

import psutil

GOAL_S = 0.8
POLL_S = 0.010
FRAME_TIMEOUT_S = 30.0
QUIT_TIMEOUT_S = 10.0
SIM_PID = "5000000"
# Runs the command, then writes its exit status to the file named first. tmux's own
# #{pane_dead_status} is unreliable (empty when the pty closes before the child is
# reaped), and a status echoed into the pane can be lost when the pane exits at once.
WRAPPER = ["sh", "-c", 'f=$1; shift; "$@"; echo $? > "$f"', "sh"]


class HarnessError(RuntimeError):
    """The benchmark itself could not run (not a missed goal)."""


def gpumon_command() -> str:
    """The ``gpumon`` console script of the interpreter running this bench."""
    beside = Path(sys.executable).parent / "gpumon"
    if beside.exists():
        return str(beside)
    found = shutil.which("gpumon")
    if found is None:
        raise HarnessError("no 'gpumon' console script; install the package (pip install -e .)")
    return found


# -- frame detection ---------------------------------------------------------------
def gpu0_util_shown(screen: str) -> bool:
    """GPU 0's panel title is on screen and a UTIL line follows it."""
    lines = screen.splitlines()
    for i, line in enumerate(lines):
        if "GPU 0 ·" in line:
            return any("UTIL" in later for later in lines[i + 1 : i + 4])
    return False


def full_frame(screen: str) -> bool:
    """Everything of the first sample is drawn, the process table included."""
    return "SIMULATED" in screen and "cores" in screen and gpu0_util_shown(screen) and SIM_PID in screen


def sampled_frame(screen: str) -> bool:
    """The first sample is drawn; for terminals too small to show a process row."""
    return "SIMULATED" in screen and "cores" in screen and gpu0_util_shown(screen)


# -- tmux ------------------------------------------------------------------------------
class TmuxServer:
    """A private tmux server on its own socket; ``close()`` kills it and all it ran."""

    def __init__(self) -> None:
        if shutil.which("tmux") is None:
            raise HarnessError("tmux is not installed")
        self.socket = f"gpumon-bench-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.socket_path: str | None = None
        self.started_pids: list[int] = []
        self.tmpdir = tempfile.mkdtemp(prefix="gpumon-bench-")
        # The placeholder session keeps the server up between the measured sessions.
        self.run("new-session", "-d", "-s", "keepalive", "-x", "20", "-y", "5", "sleep 1000000")
        self.socket_path = self.run("display-message", "-p", "-t", "keepalive", "#{socket_path}").strip() or None
        # Keep an exited pane on screen so the exit line of the wrapper can be read.
        self.run("set-option", "-g", "remain-on-exit", "on")

    def run(self, *args: str, check: bool = True) -> str:
        proc = subprocess.run(
            ["tmux", "-L", self.socket, "-f", "/dev/null", *args],
            capture_output=True,
            text=True,
            check=False,
        )
        if check and proc.returncode != 0:
            raise HarnessError(f"tmux {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc.stdout

    def server_pid(self) -> int:
        return int(self.run("display-message", "-p", "-t", "keepalive", "#{pid}").strip())

    def close(self) -> None:
        procs: list[psutil.Process] = []
        for pid in self.started_pids:
            try:
                proc = psutil.Process(pid)
                procs += [proc, *proc.children(recursive=True)]
            except psutil.NoSuchProcess:
                continue
        self.run("kill-server", check=False)
        # kill-server hangs up every pane; make sure what we started is gone.
        _, alive = psutil.wait_procs(procs, timeout=3)
        for proc in alive:
            with suppress(psutil.NoSuchProcess):
                proc.kill()
        if self.socket_path:
            with suppress(FileNotFoundError):
                os.unlink(self.socket_path)
        shutil.rmtree(self.tmpdir, ignore_errors=True)


class Pane:
    """One detached session running one command, on a TmuxServer."""

    def __init__(self, server: TmuxServer, name: str, width: int, height: int, command: Sequence[str]) -> None:
        self.server = server
        self.name = name
        self.width = width
        self.height = height
        self.command = list(command)
        self.pid: int | None = None
        self.status_path = Path(server.tmpdir) / f"{name}.status"

    def start(self) -> None:
        # A command given as several arguments is exec'd by tmux as is (here: the sh wrapper).
        self.server.run(
            "new-session",
            "-d",
            "-s",
            self.name,
            "-x",
            str(self.width),
            "-y",
            str(self.height),
            "-e",
            "COLORTERM=truecolor",
            *WRAPPER,
            str(self.status_path),
            *self.command,
        )
        self.pid = int(self.display("#{pane_pid}"))
        self.server.started_pids.append(self.pid)

    def display(self, fmt: str) -> str:
        return self.server.run("display-message", "-p", "-t", self.name, fmt).strip()

    def capture(self) -> str:
        return self.server.run("capture-pane", "-p", "-t", self.name)

    def dead(self) -> bool:
        return self.display("#{pane_dead}") == "1"

    def exit_status(self) -> int | None:
        """The command's exit status once the wrapper has written it, else None."""
        try:
            text = self.status_path.read_text().strip()
        except FileNotFoundError:
            return None
        return int(text) if text.isdigit() else None

    def app_process(self, marker: str = "gpumon") -> psutil.Process:
        """The app's process (``marker`` in its command line): the pane's or a descendant, preferring python."""
        if self.pid is None:
            raise HarnessError("pane not started")
        root = psutil.Process(self.pid)
        found: list[psutil.Process] = []
        for proc in [root, *root.children(recursive=True)]:
            with suppress(psutil.Error):
                if any(marker in part for part in proc.cmdline()):
                    found.append(proc)
        if not found:
            raise HarnessError(f"no process with {marker!r} in its command line under pane pid {self.pid}")
        pythons = [p for p in found if "python" in p.name().lower()]
        return (pythons or found)[-1]

    def wait_frame(self, is_frame: Callable[[str], bool], timeout: float = FRAME_TIMEOUT_S) -> float:
        """Poll until ``is_frame(screen)``; returns perf_counter() when it was seen."""
        deadline = time.perf_counter() + timeout
        screen = ""
        while True:
            polled = time.perf_counter()
            screen = self.capture()
            seen = time.perf_counter()
            if is_frame(screen):
                return seen
            if seen > deadline:
                raise HarnessError(f"no full frame within {timeout:.0f} s; the pane shows:\n{screen}")
            if self.dead() or self.status_path.exists():
                raise HarnessError(f"gpumon exited before drawing a full frame; the pane shows:\n{screen}")
            time.sleep(max(0.0, POLL_S - (time.perf_counter() - polled)))

    def quit(self, timeout: float = QUIT_TIMEOUT_S) -> int | None:
        """Press q and wait for the app to exit; returns its exit status (None: it did not exit)."""
        self.server.run("send-keys", "-t", self.name, "q")
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            status = self.exit_status()
            if status is not None:
                return status
            time.sleep(0.02)
        return None

    def kill(self) -> None:
        self.server.run("kill-session", "-t", self.name, check=False)


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


@contextmanager
def tmux_server() -> Iterator[TmuxServer]:
    """A private tmux server, killed with all it ran on exit, error, Ctrl-C or SIGTERM."""
    signal.signal(signal.SIGTERM, _terminated)  # run the cleanup below on a plain kill too
    server = TmuxServer()
    try:
        yield server
    finally:
        server.close()


# -- measures --------------------------------------------------------------------------
def wall(argv: Sequence[str]) -> float:
    started = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    took = time.perf_counter() - started
    if proc.returncode != 0:
        raise HarnessError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return took


def median_wall(argv: Sequence[str], times: int) -> float:
    return statistics.median(wall(argv) for _ in range(times))


def heavy_imports() -> tuple[bool, bool]:
    code = "import sys, gpumon.cli, gpumon.tui.app; print('torch' in sys.modules, 'ray' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    words = proc.stdout.split()
    if proc.returncode != 0 or len(words) != 2:
        raise HarnessError(f"import check failed ({proc.returncode}): {proc.stdout!r} {proc.stderr.strip()[-2000:]}")
    return words[0] == "True", words[1] == "True"


def one_startup(server: TmuxServer, run: int, gpumon: str) -> tuple[float, int | None]:
    pane = Pane(server, f"startup-{run}", 100, 30, [gpumon, "--simulate", "2"])
    try:
        started = time.perf_counter()
        pane.start()
        seen = pane.wait_frame(full_frame)
        return seen - started, pane.quit()
    finally:
        pane.kill()


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="launches; the first is reported as cold (default 10)")
    args = parser.parse_args(argv)
    if args.runs < 2:
        parser.error("--runs must be at least 2 (one cold, one or more warm)")
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    try:
        gpumon = gpumon_command()
        times: list[float] = []
        unclean: list[str] = []
        with tmux_server() as server:
            for run in range(args.runs):
                took, status = one_startup(server, run, gpumon)
                times.append(took)
                if status != 0:
                    unclean.append(f"run {run + 1}: " + ("did not exit on q" if status is None else f"exit {status}"))
                print(f"  run {run + 1:2d}: {ms(took)}", flush=True)
                time.sleep(0.3)  # let the last app's exit settle before the next launch
        cold, warm = times[0], times[1:]
        median = statistics.median(warm)
        print(f"startup to first full frame, gpumon --simulate 2 in tmux 100x30 ({args.runs} runs)")
        print(f"  cold (run 1): {ms(cold)}")
        print(f"  warm (n={len(warm)}): median {ms(median)}, min {ms(min(warm))}, max {ms(max(warm))}")
        print(f"  goal < {GOAL_S} s: {'met' if median < GOAL_S else 'MISSED'} (warm median)")
        if unclean:
            print(f"  WARNING: gpumon did not quit cleanly on q: {'; '.join(unclean)}")
        bare = median_wall([sys.executable, "-c", "pass"], 5)
        app = median_wall([sys.executable, "-c", "import gpumon.tui.app"], 5)
        print(
            f"import gpumon.tui.app: {ms(app)} wall (median of 5, whole python -c); "
            f"bare interpreter {ms(bare)}, so ~{ms(app - bare)} importing"
        )
        torch, ray = heavy_imports()
        verdict = "ok" if not (torch or ray) else "PROBLEM"
        print(f"start path (gpumon.cli + gpumon.tui.app) imports torch: {torch}, ray: {ray} -> {verdict}")
    except (HarnessError, OSError, subprocess.SubprocessError) as err:
        print(f"startup bench failed: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
