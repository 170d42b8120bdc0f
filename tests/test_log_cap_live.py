"""A log past its cap still shows the run as it is now: ``gpumon logs -n`` and ``--follow`` read the latest
output (``<log>.live``) while the run lives, and the follow never repeats the tail kept at the end."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import wait_ended
from tests.test_alerts_channels import Cli

# 200 KiB of filler past a 64 KiB cap, then lines that come one at a time, each when the test says so.
CHATTY = """\
import os, sys, time
print("first line of the run", flush=True)
for i in range(4000):
    print(f"filler {i:05d} " + "x" * 40)
sys.stdout.flush()
end = time.monotonic() + 600  # a test that failed before its go files never leaves this run behind for good
for step in (1, 2, 3):
    print(f"after the cap: step {step}", flush=True)
    while not os.path.exists(f"go{step}") and time.monotonic() < end:
        time.sleep(0.05)
"""


def _until(what: str, check, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while True:
        seen = check()
        if what in seen:
            return seen
        assert time.monotonic() < deadline, f"{what!r} never came; last seen:\n{seen[-2000:]}"
        time.sleep(0.3)


def test_a_log_past_its_cap_shows_and_follows_the_runs_latest_output(tmp_path: Path) -> None:
    cli = Cli(tmp_path, '[runs]\nlog_cap = "64 KiB"\n')
    run_id = cli.launch(CHATTY)
    shown = _until("after the cap: step 1", lambda: cli("logs", run_id, "-n", "2").stdout)
    assert shown.splitlines()[-1] == "after the cap: step 1", shown  # the latest line, not the head's last
    log = (cli.run_dir(run_id) / "logs" / "rank0.log").read_bytes()
    assert b"this log reached its cap" in log and b"after the cap" not in log  # the head stays the cap's
    follow = subprocess.Popen([sys.executable, "-m", "gpumon", "logs", run_id, "--follow", "-n", "1"],
                              env=cli.env, cwd=tmp_path, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert follow.stdout is not None
        assert follow.stdout.readline() == "after the cap: step 1\n"
        (tmp_path / "go1").touch()
        assert follow.stdout.readline() == "after the cap: step 2\n"  # live, a line at a time
        (tmp_path / "go2").touch()
        assert follow.stdout.readline() == "after the cap: step 3\n"
        (tmp_path / "go3").touch()
        rest = follow.stdout.read()
        assert follow.wait(timeout=120) == 0
    finally:
        follow.kill()
    # The end: the run's state, and not the tail kept in the log again (it was all shown live).
    assert rest == f"[{run_id} finished, exit code 0]\n", rest
    log = (cli.run_dir(run_id) / "logs" / "rank0.log").read_bytes()
    assert log.startswith(b"first line of the run\n") and log.endswith(b"after the cap: step 3\n")
    assert len(log) <= 64 * 1024 + 4096
    ended = cli("logs", run_id, "-n", "2").stdout.splitlines()
    assert ended == ["after the cap: step 2", "after the cap: step 3"], ended


def test_a_follow_that_reaches_the_cap_after_the_run_ended_shows_the_log_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`launch --follow` on a loaded machine can begin after the run ended: it reads the log from its start, and
    the tail kept at its end is the last of it (not the tail again from <log>.live, said as "went by unread")."""
    from gpumon.cli.common import announce_start
    from gpumon.core.runs.record.store import RunStore

    cli = Cli(tmp_path, '[runs]\nlog_cap = "64 KiB"\n')
    run_id = cli.launch('for i in range(4000):\n    print(f"line {i:05d} " + "x" * 40)\nprint("the end")\n')
    wait_ended(cli.tmp / "home", run_id)
    log = (cli.run_dir(run_id) / "logs" / "rank0.log").read_text()
    assert "of output cut here" in log and log.endswith("the end\n")
    monkeypatch.setenv("GPUMON_HOME", str(cli.tmp / "home"))
    monkeypatch.setenv("GPUMON_CONFIG_DIR", str(cli.cfg))
    assert announce_start(RunStore().resolve(run_id), "run", follow_log=True) == 0
    shown = capsys.readouterr().out
    assert shown.endswith(log + f"[{run_id} finished, exit code 0]\n"), shown[-3000:]
    assert "went by unread" not in shown
