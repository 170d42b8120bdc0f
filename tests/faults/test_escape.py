"""No process of a run escapes `gpumon stop`: every one carries the run's mark (GPUMON_RUN_DIR in its
environment), found without the supervisor's memory. Real runs; the helpers double-fork into sessions of
their own, as daemons do."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import psutil

from tests.conftest import wait_until

Gpumon = Callable[..., CompletedProcess[str]]

SCRIPT = """
import os, sys, time
from pathlib import Path

here = Path(sys.argv[1])

def daemon(name):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            (here / name).write_text(str(os.getpid()))
            while True:
                time.sleep(0.2)
        os._exit(0)

def bare(name):  # `env -i setsid sleep 900`, double-forked: no mark, no session of the run, parent gone
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            (here / name).write_text(str(os.getpid()))
            os.execv("/usr/bin/env", ["env", "-i", "sleep", "900"])
        os._exit(0)

if sys.argv[2] == "at-start":
    daemon("early.pid")  # before the supervisor's first scan
for _ in range(3000):
    if (here / "fork-now").exists() and not (here / "late.pid").exists():
        daemon("late.pid")
    if (here / "bare-now").exists() and not (here / "bare.pid").exists():
        bare("bare.pid")
    time.sleep(0.1)
"""


def rows(gpumon: Gpumon) -> dict[str, dict]:
    return {r["id"]: r for r in json.loads(gpumon("runs", "--json").stdout)["runs"]}


def launch(gpumon: Gpumon, tmp_path: Path, when: str) -> tuple[str, Path]:
    script = tmp_path / "forker.py"
    script.write_text(SCRIPT)
    done = gpumon("launch", "script", str(script), "--", str(tmp_path), when)
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split()[-1]
    assert wait_until(lambda: rows(gpumon)[run_id]["status"] == "running", timeout=60, step=0.3)
    return run_id, tmp_path / "home" / "runs" / run_id


def pid_in(path: Path) -> psutil.Process:
    assert wait_until(lambda: path.exists() and path.read_text().strip(), timeout=60, step=0.1)
    return psutil.Process(int(path.read_text()))


def test_a_daemon_forked_before_the_first_scan_is_stopped_with_the_run(gpumon: Gpumon, tmp_path: Path) -> None:
    run_id, _ = launch(gpumon, tmp_path, "at-start")
    early = pid_in(tmp_path / "early.pid")
    assert early.status() != psutil.STATUS_ZOMBIE and os.getsid(early.pid) != os.getsid(0)
    done = gpumon("stop", run_id)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert wait_until(lambda: not early.is_running(), timeout=60, step=0.2), "the daemon escaped gpumon stop"
    assert wait_until(lambda: rows(gpumon)[run_id]["status"] in ("stopped", "killed"), timeout=60, step=0.3)


def test_a_daemon_forked_after_the_supervisor_died_and_the_run_was_adopted_is_stopped(
    gpumon: Gpumon, tmp_path: Path
) -> None:
    run_id, run_dir = launch(gpumon, tmp_path, "later")
    first = json.loads((run_dir / "status.json").read_text())["supervisor_pid"]
    os.kill(first, signal.SIGKILL)
    # the next gpumon that looks adopts it: a new supervisor that only knows status.json's pids
    assert wait_until(
        lambda: rows(gpumon) and json.loads((run_dir / "status.json").read_text() or "{}").get("adopted"),
        timeout=60,
        step=0.5,
    )
    (tmp_path / "fork-now").touch()
    late = pid_in(tmp_path / "late.pid")
    done = gpumon("stop", run_id)
    assert done.returncode == 0, (done.stdout, done.stderr)
    try:
        assert wait_until(lambda: not late.is_running(), timeout=60, step=0.2), "the daemon escaped gpumon stop"
    finally:
        if late.is_running():
            late.kill()


def test_a_helper_with_an_empty_environment_forked_after_adoption_is_stopped(gpumon: Gpumon, tmp_path: Path) -> None:
    """No mark to find it by (env -i), its parent gone (double fork, setsid): the runner, a subreaper, holds it."""
    run_id, run_dir = launch(gpumon, tmp_path, "later")
    first = json.loads((run_dir / "status.json").read_text())["supervisor_pid"]
    os.kill(first, signal.SIGKILL)
    assert wait_until(
        lambda: rows(gpumon) and json.loads((run_dir / "status.json").read_text() or "{}").get("adopted"),
        timeout=60,
        step=0.5,
    )
    (tmp_path / "bare-now").touch()
    bare = pid_in(tmp_path / "bare.pid")
    try:
        assert wait_until(lambda: bare.name() == "sleep", timeout=30, step=0.1)
        assert "GPUMON_RUN_DIR" not in bare.environ() and os.getsid(bare.pid) != os.getsid(0)
        done = gpumon("stop", run_id)
        assert done.returncode == 0, (done.stdout, done.stderr)
        assert wait_until(lambda: not bare.is_running(), timeout=60, step=0.2), "the env -i helper escaped stop"
        assert wait_until(lambda: rows(gpumon)[run_id]["status"] in ("stopped", "killed"), timeout=60, step=0.3)
    finally:
        if bare.is_running():
            bare.kill()


def test_a_bare_helper_after_the_supervisor_and_runner_died_is_stopped_through_the_runs_cgroup(
    gpumon: Gpumon, tmp_path: Path
) -> None:
    """Issue 49 item 4: no mark (env -i), no session of the run, and no subreaper left to hold it: only the run's
    cgroup knows it. ``stop`` ended the rest and said "stopped" while it lived."""
    import pytest

    run_id, run_dir = launch(gpumon, tmp_path, "later")
    status = json.loads((run_dir / "status.json").read_text())
    if not status.get("cgroup"):
        root_v1 = os.geteuid() == 0 and Path("/sys/fs/cgroup/pids/cgroup.procs").exists()
        assert not root_v1, f"root with a v1 pids hierarchy, yet no cgroup: {status.get('cgroup_why')}"
        pytest.skip(f"no cgroup on this machine: {status.get('cgroup_why')}")
    os.kill(status["supervisor_pid"], signal.SIGKILL)
    os.kill(status["runner_pid"], signal.SIGKILL)
    (tmp_path / "bare-now").touch()
    bare = pid_in(tmp_path / "bare.pid")
    try:
        assert wait_until(lambda: bare.name() == "sleep", timeout=30, step=0.1)
        assert "GPUMON_RUN_DIR" not in bare.environ() and bare.ppid() == 1  # init's: no gpumon process holds it
        done = gpumon("stop", run_id)
        assert done.returncode == 0, (done.stdout, done.stderr)
        assert wait_until(lambda: not bare.is_running(), timeout=60, step=0.2), "the helper escaped gpumon stop"
        assert rows(gpumon)[run_id]["status"] in ("stopped", "killed")
    finally:
        if bare.is_running():
            bare.kill()
