"""A test that fails leaves no run behind (issue 35): its run waited for a go file the test never wrote, and it and
its supervisor loaded the machine for every later test. tests/conftest.py's ``no_run_left_behind`` kills it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gpumon.core.runs.record.store import RunStore
from tests.conftest import wait_ended

ROOT = Path(__file__).resolve().parent.parent

FAILS_EARLY = """
import os, subprocess, sys
from pathlib import Path

def test_fails_before_it_lets_its_run_go(tmp_path):
    script = tmp_path / "gated.py"
    script.write_text("import os, time\\nwhile not os.path.exists('go'):\\n    time.sleep(0.05)\\n")  # no bound
    env = {**os.environ, "GPUMON_HOME": str(tmp_path / "nested" / "home")}
    done = subprocess.run([sys.executable, "-m", "gpumon", "launch", "script", str(script)], env=env,
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    Path(os.environ["WHERE"]).write_text(str(tmp_path / "nested" / "home"))
    assert False, "a check that failed before the test wrote its go file"
"""


def test_a_failed_tests_run_waiting_on_its_go_file_is_killed_at_its_end(tmp_path: Path) -> None:
    inner = tmp_path / "test_inner.py"
    inner.write_text(FAILS_EARLY)
    where = tmp_path / "where"
    env = {
        **os.environ,
        "WHERE": str(where),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    # the suite's conftest as a plugin, in a folder of no project (none of pyproject's options)
    args = ["-p", "tests.conftest", "-n", "0", "-p", "no:cacheprovider", f"--basetemp={tmp_path / 'base'}", str(inner)]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *args], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 1 and "1 failed" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]
    home = Path(where.read_text())
    [record] = RunStore(home).list()
    wait_ended(home, record.id, timeout=120)  # its end written by its supervisor, which it no longer waits for
    ended = record.reread()
    assert ended.state == "killed", ended.status
    assert not ended.live_processes() and not ended.supervisor_alive(), ended.status
