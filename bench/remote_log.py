"""What following a remote run's log costs, against re-reading its tail every 3 s (what the Runs view did).

A real sshd on 127.0.0.1 (tests/sshd_host.py: needs root and openssh-server) plays the host, with real
OpenSSH as the client; a run on it prints a line every 0.2 s. Over a window of ``--seconds``, each way in
turn (``--repeats`` rounds, alternating which goes first):
  - reread: ``ssh HOST gpumon logs RUN --lines 200`` every 3 s: an ssh handshake and a gpumon start per read;
  - follow: one RemoteLogFollow (``ssh HOST gpumon logs RUN --follow --lines 200``) for the whole window.
Reported as percent of one core: this side (the ssh clients, as reaped children, plus this process's own
CPU: the follow's reader threads; the main thread sleeps) and the host's side (the sshd sessions and the
gpumon each runs, as the sshd listener's reaped children, read once the last session has ended).

With ``--app``: the app itself, ``gpumon --hosts 127.0.0.1:PORT`` in tmux (120x40), its CPU (all threads)
over the same window on the Runs view with the remote run selected (its log streams into the pane), then
on the Fleet view (no follow; the host's snapshot stream and runs polls as before).

Usage: python bench/remote_log.py [--seconds 60] [--repeats 2] [--app]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpumon.core.fleet.hosts import Host, parse_host, ssh_argv  # noqa: E402
from gpumon.core.fleet.log_follow import RemoteLogFollow, log_words  # noqa: E402
from tests.sshd_host import Sshd, start_sshd  # noqa: E402

GPUMON = str(Path(sys.executable).with_name("gpumon"))
EVERY_S = 3.0
LINES = 200
CHATTY = "import time\nfor i in range(10**6):\n    print(f'step {i} loss {1 / (i + 1):.4f}', flush=True)\n    time.sleep(0.2)\n"  # noqa: E501
QUIET = "import time\nprint('quiet from now on', flush=True)\ntime.sleep(10**6)\n"


def cpu(proc: psutil.Process) -> tuple[float, float]:
    """(own CPU s, reaped children's CPU s)."""
    t = proc.cpu_times()
    return t.user + t.system, t.children_user + t.children_system


def sessions_over(listener: psutil.Process, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while listener.children() and time.monotonic() < deadline:
        time.sleep(0.1)


def reread(sshd: Sshd, host: Host, run_id: str, seconds: float) -> str:
    argv = ssh_argv(sshd.ssh(), host, [GPUMON, *log_words(run_id, LINES)])
    reads, next_at, end = 0, time.monotonic(), time.monotonic() + seconds
    while next_at < end:
        subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, check=True)
        reads += 1
        next_at += EVERY_S
        time.sleep(max(0.0, next_at - time.monotonic()))
    return f"{reads} reads"


def follow(sshd: Sshd, host: Host, run_id: str, seconds: float) -> str:
    following = RemoteLogFollow(sshd.ssh(), host, [GPUMON], run_id, LINES).start()
    time.sleep(seconds)
    following.stop()
    return f"{following.received} lines, reason {following.reason}"


def window(sshd: Sshd, way: Callable[[Sshd, Host, str, float], str], host: Host, run_id: str, seconds: float) -> None:
    me, listener = psutil.Process(), psutil.Process(sshd.pid)
    (own0, kids0), (_, host0) = cpu(me), cpu(listener)
    started = time.monotonic()
    said = way(sshd, host, run_id, seconds)
    took = time.monotonic() - started
    sessions_over(listener)
    (own1, kids1), (_, host1) = cpu(me), cpu(listener)
    here = (own1 - own0 + kids1 - kids0) / took * 100
    there = (host1 - host0) / took * 100
    print(f"{way.__name__:7s} {took:5.1f} s  this side {here:5.2f}%  the host {there:5.2f}%  ({said})", flush=True)


def app_windows(sshd: Sshd, host: Host, tmp: Path, runs: dict[str, str], seconds: float) -> None:
    from idle_cpu import WARMUP_S, cpu_seconds
    from startup import Pane, tmux_server

    (tmp / "cfg").mkdir(exist_ok=True)
    (tmp / "cfg" / "config.toml").write_text(f'[fleet]\ngpumon = "{GPUMON}"\n')
    ssh = " ".join(sshd.ssh())
    command = ["env", f"GPUMON_CONFIG_DIR={tmp / 'cfg'}", f"GPUMON_HOME={tmp / 'here'}", sys.executable, "-m"]
    command += ["gpumon", "--simulate", "1", "--hosts", host.name, "--ssh", ssh]
    windows = (  # keys, what is shown, what the screen shows once it is
        (["/", runs["quiet"], "Enter"], "runs, a quiet log followed", "quiet from now on"),
        (["/", runs["chatty"], "Enter"], "runs, 5 log lines/s", "step "),
        (["h"], "fleet, no follow", "GPUs idle"),
    )
    with tmux_server() as server:
        pane = Pane(server, "app", 120, 40, command)
        pane.start()
        try:
            pane.wait_frame(lambda screen: "live" in screen)
            server.run("send-keys", "-t", "app", "r")
            pane.wait_frame(lambda screen: runs["chatty"] in screen and runs["quiet"] in screen)
            for keys, view, frame in windows:
                for key in keys:
                    server.run("send-keys", "-t", "app", *(["-l", key] if len(key) > 1 and key != "Enter" else [key]))
                    time.sleep(0.3)  # the filter box opens before the id is typed
                pane.wait_frame(lambda screen, frame=frame: frame in screen)  # type: ignore[misc]
                time.sleep(WARMUP_S)
                app = pane.app_process("--hosts")
                user0, sys0 = cpu_seconds(app)
                started = time.monotonic()
                time.sleep(seconds)
                user1, sys1 = cpu_seconds(app)
                percent = (user1 - user0 + sys1 - sys0) / (time.monotonic() - started) * 100
                print(f"app     {view:28s} {percent:5.2f}% of one core", flush=True)
        finally:
            pane.quit()
            pane.kill()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--app", action="store_true", help="also the app's CPU in tmux, log streaming or not")
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="gpumon-remote-log-"))
    sshd = start_sshd(tmp)
    if isinstance(sshd, str):
        print(f"cannot run: {sshd}", file=sys.stderr)
        return 2
    host = parse_host(f"127.0.0.1:{sshd.port}")
    (tmp / "chatty.py").write_text(CHATTY)
    (tmp / "quiet.py").write_text(QUIET)
    runs = {}
    for name in ("chatty", "quiet"):
        launched = ssh_argv(sshd.ssh(), host, [GPUMON, "launch", "script", str(tmp / f"{name}.py")])
        runs[name] = subprocess.run(launched, capture_output=True, text=True, check=True).stdout.split()[-1]
    run_id = runs["chatty"]
    try:
        time.sleep(3)  # the run's first lines
        for round_ in range(args.repeats):
            ways = (reread, follow) if round_ % 2 == 0 else (follow, reread)
            for way in ways:
                window(sshd, way, host, run_id, args.seconds)
        if args.app:
            app_windows(sshd, host, tmp, runs, args.seconds)
    finally:
        for started in runs.values():
            stop = ssh_argv(sshd.ssh(), host, [GPUMON, "stop", started, "--kill"])
            subprocess.run(stop, capture_output=True, check=False)
        sshd.stop()
    print(f"machine: {os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
