"""Faults nobody listed, tried as an operator of a shared server would (docs/reliability.md): real runs through
the CLI, real signals, real links and mounts."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from subprocess import CompletedProcess

import psutil
import pytest

from tests.conftest import Gpumon, wait_until


def rows(gpumon: Gpumon) -> dict[str, dict]:
    done = gpumon("runs", "--json")
    assert done.returncode == 0, done.stderr
    return {r["id"]: r for r in json.loads(done.stdout)["runs"]}


def start(gpumon: Gpumon, tmp_path: Path, text: str, *args: str) -> tuple[str, Path, dict]:
    """A run of ``text`` once it runs: its id, its directory and its status."""
    script = tmp_path / "script.py"
    script.write_text(text)
    done = gpumon("launch", "script", str(script), "--", *args)
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split()[-1]
    run_dir = tmp_path / "home" / "runs" / run_id
    assert wait_until(lambda: "runner_pid" in status(run_dir) and "pid" in status(run_dir), timeout=60, step=0.1)
    return run_id, run_dir, status(run_dir)


def status(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "status.json").read_text())
    except (OSError, ValueError):
        return {}


def ended(gpumon: Gpumon, run_id: str, timeout: float = 90) -> dict:
    """The run's row once it ended, its end waited for in its files: a `gpumon runs` per poll cost a CPU second
    each, taken from the run. While the run has no supervisor, each look is a `gpumon runs`, as the user's would
    be: it adopts the run."""
    from gpumon.core.runs.record.store import RunStore

    store = RunStore(gpumon.home)

    def over() -> bool:
        record = store.load(store.runs_dir / run_id)
        if record is not None and record.state == "unsupervised":
            rows(gpumon)
            record = record.reread()
        return record is not None and not record.live

    assert wait_until(over, timeout=timeout, step=0.3), rows(gpumon)[run_id]
    return rows(gpumon)[run_id]


@pytest.fixture
def leftovers(tmp_path: Path) -> Iterator[None]:
    """Whatever a test leaves running (a stopped runner, the run's processes) is killed at its end."""
    yield
    home = str(tmp_path / "home")
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("GPUMON_RUN_DIR", "").startswith(home) or home in " ".join(proc.cmdline()):
                proc.kill()
        except psutil.Error:
            continue


GATED = """
import os, signal, sys, time
print("hup is", "default" if signal.getsignal(signal.SIGHUP) == signal.SIG_DFL else "ignored", flush=True)
end = time.monotonic() + 600  # a test that failed before its gate never leaves this run behind for good
while not os.path.exists(sys.argv[1]) and time.monotonic() < end:
    time.sleep(0.05)
for i in range(3000):
    print(f"line {i} " + "h" * 1000, flush=True)  # 3 MB: more than the output pipe holds
print("the end", flush=True)
"""


@pytest.mark.parametrize("whom", ["supervisor", "runner"])
def test_a_hang_up_of_the_supervisor_or_runner_ends_neither(
    gpumon: Gpumon, tmp_path: Path, leftovers: None, whom: str
) -> None:
    """Fault 1-2: the ssh session that launched the run closes, or an operator sends SIGHUP by pid."""
    gate = tmp_path / "gate"
    run_id, run_dir, st = start(gpumon, tmp_path, GATED, str(gate))
    pid = int(st[f"{whom}_pid"])
    os.kill(pid, signal.SIGHUP)
    gate.touch()
    row = ended(gpumon, run_id)
    assert row["status"] == "finished" and row["exit_code"] == 0, row
    assert "adopted" not in status(run_dir)  # the supervisor saw the end itself
    log = (run_dir / "logs" / "rank0.log").read_text()
    assert "line 2999 " in log and log.rstrip().endswith("the end")


def test_a_runs_script_gets_sighup_as_it_would_by_itself(gpumon: Gpumon, tmp_path: Path, leftovers: None) -> None:
    """Fault 3: the supervisor ignores hang-ups (SIG_IGN), and an ignored signal is inherited through exec: the
    user's script ran with SIGHUP ignored, so `kill -HUP` (or a script's own reload handler default) did nothing."""
    gate = tmp_path / "gate"
    gate.touch()
    run_id, run_dir, _ = start(gpumon, tmp_path, GATED, str(gate))
    ended(gpumon, run_id)
    assert "hup is default" in (run_dir / "logs" / "rank0.log").read_text()


@pytest.mark.parametrize("supervisor_dead", [False, True], ids=["supervised", "adopted"])
def test_a_sigstopped_runner_never_blocks_the_scripts_prints(
    gpumon: Gpumon, tmp_path: Path, leftovers: None, supervisor_dead: bool
) -> None:
    """Fault 4: the runner (the command's parent that drains its output) is SIGSTOPped by an operator (or a
    debugger attached and left): the script's print() filled the pipe and waited for ever. Its supervisor, or
    the gpumon that adopts the run once the supervisor died, continues it."""
    gate = tmp_path / "gate"
    run_id, run_dir, st = start(gpumon, tmp_path, GATED, str(gate))
    runner = int(st["runner_pid"])
    os.kill(runner, signal.SIGSTOP)
    if supervisor_dead:
        supervisor = psutil.Process(int(st["supervisor_pid"]))
        supervisor.kill()
        supervisor.wait(30)  # then `gpumon runs` (in ended()) adopts the run
    try:
        gate.touch()
        row = ended(gpumon, run_id, timeout=120)
    finally:
        with contextlib.suppress(OSError):
            os.kill(runner, signal.SIGCONT)
    assert row["status"] == "finished" and row["exit_code"] == 0, row
    assert (run_dir / "logs" / "rank0.log").read_text().rstrip().endswith("the end")


ONE_LINE = """
import sys
sys.stdout.write("start ")
for _ in range(10):
    sys.stdout.write("n" * (1 << 20))  # 10 MiB, no newline at all
sys.stdout.flush()
"""


def test_a_10_mb_line_with_no_newline_is_capped_and_the_run_finishes(
    gpumon: Gpumon, tmp_path: Path, leftovers: None
) -> None:
    """Fault 5: one huge line (a progress bar that never prints \\n, a dumped tensor)."""
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.toml").write_text('[runs]\nlog_cap = "1 MiB"\n')
    env = {**os.environ, "GPUMON_HOME": str(tmp_path / "home"), "GPUMON_CONFIG_DIR": str(tmp_path / "config")}

    def capped(*args: str) -> CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gpumon", *args], env=env, capture_output=True, text=True)

    run_id, run_dir, _ = start(capped, tmp_path, ONE_LINE)
    row = ended(gpumon, run_id)
    assert row["status"] == "finished", row
    log = run_dir / "logs" / "rank0.log"
    assert log.stat().st_size <= (1 << 20) + 4096
    text = log.read_bytes()
    assert text.startswith(b"start nnn") and text.endswith(b"n" * 1000) and b"of output cut here" in text
    shown = gpumon("logs", run_id)
    assert shown.returncode == 0 and "of output cut here" in shown.stdout


CLOSER = """
import os, sys, time
print("before closing", flush=True)
os.close(1)
os.close(2)
time.sleep(0.5)
open(sys.argv[1], "w").write("still alive")
"""


def test_a_script_that_closes_its_stdout_and_stderr_finishes(gpumon: Gpumon, tmp_path: Path, leftovers: None) -> None:
    """Fault 6: a daemon-style script closes fds 1 and 2 (no EOF confusion, no lost end)."""
    alive = tmp_path / "alive"
    run_id, run_dir, _ = start(gpumon, tmp_path, CLOSER, str(alive))
    row = ended(gpumon, run_id)
    assert row["status"] == "finished" and row["exit_code"] == 0 and alive.exists(), row
    assert "before closing" in (run_dir / "logs" / "rank0.log").read_text()


SESSION = """
import os, sys, time
if os.fork() == 0:
    os.setsid()  # its own session and process group: out of the group gpumon signals
    if os.fork() == 0:
        os.setpgid(0, 0)
        while True:
            time.sleep(1)
    while True:
        time.sleep(1)
while len(open(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read().split()) < 1:
    time.sleep(0.05)
time.sleep(0.5)
open(sys.argv[1], "w").write("ready")
while True:
    time.sleep(1)
"""


def test_stop_ends_a_script_that_left_its_process_group_and_session(
    gpumon: Gpumon, tmp_path: Path, leftovers: None
) -> None:
    """Fault 7: the script calls setsid() (and its child setpgid()): signals to the run's group miss them."""
    ready = tmp_path / "ready"
    run_id, _, st = start(gpumon, tmp_path, SESSION, str(ready))
    assert wait_until(ready.exists, timeout=30)
    main = psutil.Process(int(st["pid"]))
    assert wait_until(lambda: len(main.children(recursive=True)) == 2, timeout=30)
    procs = [main, *main.children(recursive=True)]
    assert {p.pid for p in procs[1:]} & {os.getsid(p.pid) for p in procs[1:]}  # one left the run's session
    done = gpumon("stop", run_id)
    assert done.returncode == 0, done.stderr
    assert wait_until(lambda: not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in procs), 30)
    assert ended(gpumon, run_id)["status"] == "stopped"


FORKER = """
import os, sys, time
children = []
for _ in range(int(sys.argv[2])):
    pid = os.fork()
    if pid == 0:
        while True:
            time.sleep(1)
    children.append(pid)
open(sys.argv[1], "w").write("forked")
while True:
    time.sleep(1)
"""


def test_stop_ends_a_rank_that_forked_500_children(gpumon: Gpumon, tmp_path: Path, leftovers: None) -> None:
    """Fault 8: a rank forks 500 children (a runaway worker pool): stop leaves none behind, in bounded time."""
    forked = tmp_path / "forked"
    run_id, _, st = start(gpumon, tmp_path, FORKER, str(forked), "500")
    assert wait_until(forked.exists, timeout=120, step=0.2)
    procs = psutil.Process(int(st["pid"])).children(recursive=True)
    assert len(procs) == 500
    done = gpumon("stop", run_id)
    assert done.returncode == 0, done.stderr
    assert wait_until(lambda: not [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE], 60)
    assert ended(gpumon, run_id)["status"] == "stopped"


LINKED = """
import os, sys, time
print("before the link", flush=True)
end = time.monotonic() + 600  # a test that failed before its gate never leaves this run behind for good
while not os.path.exists(sys.argv[1]) and time.monotonic() < end:
    time.sleep(0.05)
for i in range(40):
    print("after the link", i, flush=True)
    time.sleep(0.05)
"""


def test_a_link_planted_as_the_logs_folder_is_not_written_through(
    gpumon: Gpumon, tmp_path: Path, leftovers: None
) -> None:
    """Fault 9: a middle component of a state-dir path (the run's logs/ folder) replaced by a link to a folder
    outside: O_NOFOLLOW guards only the last component, so the runner wrote rank0.log into the link's target."""
    gate, outside = tmp_path / "gate", tmp_path / "outside"
    outside.mkdir()
    run_id, run_dir, _ = start(gpumon, tmp_path, LINKED, str(gate))
    logs = run_dir / "logs"
    assert wait_until(lambda: "before the link" in (logs / "rank0.log").read_text(), timeout=30)
    moved = run_dir / "logs.moved"
    os.rename(logs, moved)
    os.symlink(outside, logs)
    gate.touch()
    row = ended(gpumon, run_id)
    assert row["status"] == "finished", row
    assert list(outside.iterdir()) == [], "gpumon wrote through the planted link"
    assert not logs.is_symlink() and "after the link 39" in (logs / "rank0.log").read_text()


def test_a_read_only_state_dir_is_one_line_not_a_traceback(gpumon: Gpumon, tmp_path: Path) -> None:
    """Fault 10: GPUMON_HOME on a read-only bind mount (a shared, exported home)."""
    home = tmp_path / "home"
    gpumon("runs")  # the state dir exists, then it goes read-only
    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root")
    done = subprocess.run(["mount", "--bind", "-o", "ro", str(home), str(home)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot bind-mount read-only here: {done.stderr.decode().strip()}")
    try:
        script = tmp_path / "hi.py"
        script.write_text("print('hi')\n")
        for args in (("launch", "script", str(script)), ("runs",), ("queue",), ("prune",)):
            ran = gpumon(*args)
            assert "Traceback" not in ran.stderr, (args, ran.stderr)
            assert len(ran.stderr.strip().splitlines()) <= 1, (args, ran.stderr)
        launched = gpumon("launch", "script", str(script))
        assert launched.returncode == 2 and "read-only" in launched.stderr.lower(), launched
    finally:
        subprocess.run(["umount", "-l", str(home)], capture_output=True)


MARKED = """
print("a line of the run")
print("\\0gpumon-rank 7")  # bytes gpumon's own FIFOs use to name a rank's log
print("the rest of the run")
"""


def test_a_script_that_prints_gpumons_rank_mark_keeps_its_output_in_its_log(
    gpumon: Gpumon, tmp_path: Path, leftovers: None
) -> None:
    """Fault 11: a script (binary output, a hostile user) prints the bytes that name a torchrun rank's log on its
    FIFO: on the main pipe they sent the rest of its output into rank7.log."""
    run_id, run_dir, _ = start(gpumon, tmp_path, MARKED)
    ended(gpumon, run_id)
    assert "the rest of the run" in (run_dir / "logs" / "rank0.log").read_text()
    assert not (run_dir / "logs" / "rank7.log").exists()


def test_a_launch_with_64_file_descriptors_runs(gpumon: Gpumon, tmp_path: Path, leftovers: None) -> None:
    """Fault 12: `ulimit -n 64` in the operator's shell (inherited by the supervisor, its runner and the run)."""
    script = tmp_path / "hi.py"
    script.write_text("import torch\nprint('hi', torch.ones(2).sum().item())\n")
    env = {**os.environ, "GPUMON_HOME": str(tmp_path / "home"), "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(
        ["bash", "-c", 'ulimit -n 64 && exec "$0" -m gpumon launch script --nproc 2 "$1"', sys_executable(), script],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split()[-1]
    row = ended(gpumon, run_id, timeout=180)
    assert row["status"] == "finished", (row, (tmp_path / "home" / "runs" / run_id / "supervisor.log").read_text())


def sys_executable() -> str:
    return sys.executable
