"""Following a remote run's log through one long-lived ssh (core/fleet/log_follow.py), with real runs on
stand-in hosts (tests/fleet_ssh.py behind a wrapper that writes a line for each ssh it starts)."""

from __future__ import annotations

import re
import shlex
import sys
import threading
from pathlib import Path

import pytest

from gpumon.core.fleet.hosts import parse_host
from gpumon.core.fleet.log_follow import RemoteLogFollow
from gpumon.core.fleet.reasons import AUTH, NOT_INSTALLED, UNREACHABLE
from tests.conftest import wait_until
from tests.test_fleet_links import STAND_IN
from tests.test_fleet_runs import in_group, launch_on, loop_runs


def counting_ssh(tmp_path: Path, root: Path) -> tuple[list[str], Path]:
    """(the ssh argv, the file it appends a line to each time it starts): the stand-in ssh behind a wrapper."""
    starts = tmp_path / "ssh-starts"
    wrapper = tmp_path / "counting-ssh"
    stand_in = shlex.join([sys.executable, str(STAND_IN), "--root", str(root), "--gpus", "2"])
    wrapper.write_text(f'#!/bin/sh\necho "$$" >> {shlex.quote(str(starts))}\nexec {stand_in} "$@"\n')
    wrapper.chmod(0o755)
    return [str(wrapper)], starts


def ticks(lines: list[str]) -> list[int]:
    return [int(m.group(1)) for line in lines if (m := re.match(r"tick (\d+) on gpu1", line))]


def test_a_live_runs_new_lines_come_through_one_ssh_and_stop_leaves_no_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path / "here"))
    with loop_runs(tmp_path, ("gpu1",)) as (root, runs):
        ssh, starts = counting_ssh(tmp_path, root)
        came = threading.Event()
        follow = RemoteLogFollow(ssh, parse_host("gpu1"), "gpumon", runs["gpu1"], 30, on_change=came.set).start()
        try:
            assert wait_until(lambda: ticks(list(follow.lines)), timeout=60), follow.reason
            shown, replace = follow.take()
            assert replace  # the first lines: the pane shows them alone
            seen = list(shown)
            while not ticks(seen) or ticks(seen)[-1] < ticks(seen)[0] + 10:  # ten more lines, as the run prints
                assert came.wait(timeout=30), follow.reason
                came.clear()
                new, replace = follow.take()
                assert not replace  # appended to what was shown
                seen += new
            assert ticks(seen) == list(range(ticks(seen)[0], ticks(seen)[-1] + 1))  # none lost, none twice
            assert len(starts.read_text().splitlines()) == 1  # one ssh for all of them
            assert not follow.done and follow.reason is None
            pid = follow.pid
            assert pid is not None and in_group(pid)
        finally:
            follow.stop()
        assert follow.done and not follow.complete and follow.reason is None and follow.pid is None
        assert wait_until(lambda: not in_group(pid), timeout=20), in_group(pid)
        assert len(starts.read_text().splitlines()) == 1


def test_a_run_that_ends_completes_the_follow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path / "here"))
    script = tmp_path / "five.py"
    script.write_text("import time\nfor i in range(5):\n    print(f'line {i}', flush=True)\n    time.sleep(0.4)\n")
    root = tmp_path / "hosts"
    run_id = launch_on(root, "gpu1", script)
    ssh, starts = counting_ssh(tmp_path, root)
    follow = RemoteLogFollow(ssh, parse_host("gpu1"), "gpumon", run_id, 50).start()
    try:
        assert wait_until(lambda: follow.done, timeout=90)
    finally:
        follow.stop()
    assert follow.complete and follow.reason is None, follow.reason
    assert follow.lines == (*(f"line {i}" for i in range(5)), f"[{run_id} finished, exit code 0]")
    assert follow.pid is None and len(starts.read_text().splitlines()) == 1


def test_a_host_that_is_down_or_cannot_follow_gives_its_reason_in_words(tmp_path: Path) -> None:
    root = tmp_path / "hosts"
    (root / "gpu1").mkdir(parents=True)
    (root / "gpu1" / "down").touch()
    ssh, _ = counting_ssh(tmp_path, root)
    expected = {
        "gpu1": f"gpu1: {UNREACHABLE}",
        "denied": f"denied: {AUTH}",
        "bare": f"bare: {NOT_INSTALLED}",
        "gpu2": "no run 'script-nope' (see 'gpumon runs' for the ids)",  # the host's gpumon's own answer
    }
    follows = {host: RemoteLogFollow(ssh, parse_host(host), "gpumon", "script-nope", 20) for host in expected}
    for follow in follows.values():
        follow.start()
    try:
        assert wait_until(lambda: all(f.done for f in follows.values()), timeout=60)
    finally:
        for follow in follows.values():
            follow.stop()
    assert {host: f.reason for host, f in follows.items()} == expected
    assert not any(f.complete or f.lines for f in follows.values())
