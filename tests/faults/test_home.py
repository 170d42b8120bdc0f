"""An unusable GPUMON_HOME, a corrupt index, a far too large --nproc, an empty run id: one line, exit 2."""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

COMMANDS = (
    ("runs",),
    ("launch", "script", "train.py"),
    ("doctor",),
    ("prune", "--keep", "0", "--yes"),
    ("stop", "abc"),
    ("logs", "last"),
    (),  # the app
)


def run_gpumon(home: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUMON_HOME": str(home), "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run(
        [sys.executable, "-m", "gpumon", *args], env=env, capture_output=True, text=True, timeout=120, cwd=cwd
    )


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "ro"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("a read-only mount needs root (root ignores a directory's mode bits)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


@pytest.mark.parametrize("form", ["proc", "file", "read-only parent"])
def test_an_unusable_home_is_one_line_and_exit_2_on_every_command(
    form: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if form == "proc":
        home = Path("/proc/gpumon-home")
    elif form == "file":
        home = tmp_path / "a-file"
        home.write_text("not a directory")
    else:
        home = request.getfixturevalue("read_only_dir") / "gpumon"
    (tmp_path / "train.py").write_text("print('never runs')\n")
    for args in COMMANDS:
        done = run_gpumon(home, *args, cwd=tmp_path)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2, (args, done.stderr)
        assert len(lines) == 1 and "Traceback" not in done.stderr, (args, done.stderr)
        assert f"cannot use its state dir {home}" in lines[0] and "set GPUMON_HOME" in lines[0]


def test_nproc_far_beyond_the_machine_is_refused_unless_forced(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('ran')\n")
    done = run_gpumon(tmp_path / "home", "launch", "script", "train.py", "--nproc", "100000", cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    found = re.search(r"more than 4 x max\(CPUs, GPUs\) = (\d+) on this machine", done.stderr)
    assert found and "--force" in done.stderr, done.stderr
    limit = int(found.group(1))
    assert limit >= 4 * (os.cpu_count() or 1)
    assert not (tmp_path / "home" / "runs").exists() or not list((tmp_path / "home" / "runs").iterdir())
    at_limit = run_gpumon(
        tmp_path / "home", "launch", "script", "train.py", "--nproc", str(limit + 1), "--force", cwd=tmp_path
    )
    assert "more than 4 x" not in at_limit.stderr  # --force lets it through to torchrun
    run_gpumon(tmp_path / "home", "stop", "last")


@pytest.mark.parametrize("run_id", ["", "   "])
def test_an_empty_run_id_is_refused(run_id: str, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("import time; time.sleep(120)\n")
    home = tmp_path / "home"
    started = run_gpumon(home, "launch", "script", "train.py", cwd=tmp_path)
    assert started.returncode == 0, started.stderr
    try:
        for command in ("stop", "logs", "doctor"):
            done = run_gpumon(home, command, run_id)
            assert done.returncode == 2 and "an empty run id" in done.stderr, (command, done.stderr)
        assert "running" in run_gpumon(home, "runs").stdout  # nothing was stopped
    finally:
        run_gpumon(home, "stop", "last")


def test_an_index_locked_by_another_writer_is_read_around_never_rebuilt(tmp_path: Path) -> None:
    """ "database is locked" (or full) is an OperationalError, itself a DatabaseError: it once set the live index
    aside and deleted its WAL under the other readers (a loaded CI lost every row)."""
    (tmp_path / "train.py").write_text("print('done')\n")
    home = tmp_path / "home"
    for _ in range(2):
        assert run_gpumon(home, "launch", "script", "train.py", cwd=tmp_path).returncode == 0
    # An ending supervisor indexes its run: one still at it when the lock is taken drops its row (the next
    # reader folds it in), which this test's last check would count as a row lost.
    _supervisors_gone(home)
    ids = {line.split()[0] for line in run_gpumon(home, "runs").stdout.splitlines()[1:]}
    assert len(ids) == 2, ids
    index = home / "index.sqlite3"
    hold = sqlite3.connect(index, isolation_level=None)  # a writer that keeps the lock past the busy timeout
    try:
        hold.execute("PRAGMA locking_mode=EXCLUSIVE")
        hold.execute("BEGIN EXCLUSIVE")
        hold.execute("UPDATE runs SET created = created")
        locked = run_gpumon(home, "runs")
        hold.execute("COMMIT")
    finally:
        hold.close()  # an exclusive locking mode holds the lock until the connection closes
    assert locked.returncode == 0 and "run index" not in locked.stderr, locked.stderr
    assert {line.split()[0] for line in locked.stdout.splitlines()[1:]} == ids  # read from the run dirs
    assert not (home / "index.sqlite3.unreadable").exists()
    with sqlite3.connect(index) as db:
        assert {row[0] for row in db.execute("SELECT id FROM runs")} == ids


def _supervisors_gone(home: Path) -> None:
    for status in (home / "runs").glob("*/status.json"):
        pid = json.loads(status.read_text())["supervisor_pid"]
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(pid).wait(timeout=120)


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_corrupt_index_is_said_once_and_rebuilt(damage: str, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('done')\n")
    home = tmp_path / "home"
    for _ in range(2):
        assert run_gpumon(home, "launch", "script", "train.py", cwd=tmp_path).returncode == 0
    before = run_gpumon(home, "runs")
    ids = [line.split()[0] for line in before.stdout.splitlines()[1:]]
    assert len(ids) == 2, before.stdout
    _supervisors_gone(home)  # an ending supervisor indexes its run: it would find the damage and mend it unseen
    index = home / "index.sqlite3"
    for suffix in ("-wal", "-shm"):
        Path(str(index) + suffix).unlink(missing_ok=True)
    if damage == "garbage":
        index.write_bytes(b"this is not a database" * 400)
    else:
        index.write_bytes(index.read_bytes()[:2048])  # the header survives, the pages do not
    first = run_gpumon(home, "runs")
    assert first.returncode == 0 and "Traceback" not in first.stderr
    notes = [line for line in first.stderr.splitlines() if "run index" in line]
    assert len(notes) == 1 and "unreadable" in notes[0] and "rebuilt from the run directories" in notes[0]
    assert [line.split()[0] for line in first.stdout.splitlines()[1:]] == ids
    second = run_gpumon(home, "runs")
    assert "run index" not in second.stderr  # said once: the rebuilt index is whole
    with sqlite3.connect(index) as db:
        assert {row[0] for row in db.execute("SELECT id FROM runs")} == set(ids)
