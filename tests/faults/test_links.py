"""A link planted in the state dir is never followed: the status written through a link at its temporary
file, the index chmod-ed and written through a link at index.sqlite3, a log appended through a link at
logs/rank0.log before adoption; each is removed (its target left as it was) and said once. Real runs."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import wait_ended, wait_until

GATED = """
import os, sys, time
print("before the gate", flush=True)
end = time.monotonic() + 600  # a test that failed before its gate never leaves this run behind for good
while not os.path.exists(sys.argv[1]) and time.monotonic() < end:
    time.sleep(0.05)
print("after the gate", flush=True)
"""


def run_gpumon(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUMON_HOME": str(tmp_path / "home"), "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run(
        [sys.executable, "-m", "gpumon", *args], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path
    )


def outside(tmp_path: Path, content: bytes = b"") -> Path:
    """A file outside the state dir, 0644, that no link may reach."""
    target = tmp_path / "outside" / "precious"
    target.parent.mkdir()
    target.write_bytes(content)
    target.chmod(0o644)
    return target


def untouched(target: Path, content: bytes) -> None:
    assert target.read_bytes() == content, "written through the planted link"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644, "chmod-ed through the planted link"


def state(tmp_path: Path, run_id: str) -> str:
    rows = json.loads(run_gpumon(tmp_path, "runs", "--json").stdout)["runs"]
    return next(r["status"] for r in rows if r["id"] == run_id)


def start_gated(tmp_path: Path) -> tuple[str, Path, Path]:
    (tmp_path / "gated.py").write_text(GATED)
    gate = tmp_path / "gate"
    done = run_gpumon(tmp_path, "launch", "script", "gated.py", "--", str(gate))
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split()[-1]
    run_dir = tmp_path / "home" / "runs" / run_id
    log = run_dir / "logs" / "rank0.log"
    assert wait_until(lambda: log.exists() and b"before the gate" in log.read_bytes(), timeout=60, step=0.1)
    return run_id, run_dir, gate


def test_a_link_at_the_status_files_temporary_name_is_removed_not_written_through(tmp_path: Path) -> None:
    run_id, run_dir, gate = start_gated(tmp_path)
    content = b"precious: not a run's status\n"
    target = outside(tmp_path, content)
    supervisor = json.loads((run_dir / "status.json").read_text())["supervisor_pid"]
    planted = run_dir / f".status.json.{supervisor}.tmp"  # the name the supervisor writes its status under
    planted.symlink_to(target)
    gate.touch()
    assert wait_until(lambda: state(tmp_path, run_id) == "finished", timeout=60, step=0.3)
    untouched(target, content)
    assert json.loads((run_dir / "status.json").read_text())["state"] == "finished"
    assert not (run_dir / "status.json").is_symlink()
    said = [line for line in (run_dir / "supervisor.log").read_text().splitlines() if planted.name in line]
    assert len(said) == 1 and "a link to" in said[0] and "not followed" in said[0], said


def test_a_link_at_the_index_is_removed_not_chmod_ed_nor_written_through(tmp_path: Path) -> None:
    (tmp_path / "done.py").write_text("print('done')\n")
    launched = run_gpumon(tmp_path, "launch", "script", "done.py")
    assert launched.returncode == 0
    wait_ended(tmp_path / "home", launched.stdout.split()[-1], timeout=60)
    assert "finished" in run_gpumon(tmp_path, "runs").stdout
    index = tmp_path / "home" / "index.sqlite3"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{index}{suffix}").unlink(missing_ok=True)
    target = outside(tmp_path)  # empty: SQLite would take it for a new database and write its pages there
    index.symlink_to(target)
    first = run_gpumon(tmp_path, "runs")
    assert first.returncode == 0 and "Traceback" not in first.stderr, first.stderr
    assert "finished" in first.stdout  # the runs are still listed, from their folders
    untouched(target, b"")
    said = [line for line in first.stderr.splitlines() if "index.sqlite3" in line]
    assert len(said) == 1 and "a link to" in said[0] and "not followed" in said[0], first.stderr
    assert index.is_file() and not index.is_symlink()
    second = run_gpumon(tmp_path, "runs")
    assert "index.sqlite3" not in second.stderr  # said once: the index made anew is a file
    untouched(target, b"")


def test_a_link_at_a_rank_log_planted_before_adoption_is_not_appended_to(tmp_path: Path) -> None:
    run_id, run_dir, gate = start_gated(tmp_path)
    content = b"precious: not a log\n"
    target = outside(tmp_path, content)
    status = json.loads((run_dir / "status.json").read_text())
    os.kill(status["supervisor_pid"], signal.SIGKILL)
    log = run_dir / "logs" / "rank0.log"
    before = log.read_bytes()
    log.unlink()
    log.symlink_to(target)
    # `gpumon logs` refuses to read through it: one line, exit 2, not the outside file's content
    read = run_gpumon(tmp_path, "logs", run_id)
    assert read.returncode == 2 and "precious" not in read.stdout, (read.stdout, read.stderr)
    assert len(read.stderr.strip().splitlines()) == 1 and "a link to" in read.stderr, read.stderr
    # the next gpumon that looks adopts the run: its supervisor drains the output into logs/rank0.log
    assert wait_until(
        lambda: run_gpumon(tmp_path, "runs") and json.loads((run_dir / "status.json").read_text()).get("adopted"),
        timeout=60,
        step=0.5,
    )
    gate.touch()
    assert wait_until(lambda: state(tmp_path, run_id) in ("exited", "finished"), timeout=60, step=0.3)
    untouched(target, content)
    assert log.is_file() and not log.is_symlink()
    text = log.read_text()
    assert "after the gate" in text and "before the gate" not in text, text
    notes = [line for line in text.splitlines() if "not followed" in line]
    assert len(notes) == 1 and "rank0.log was a link to" in notes[0], text
    assert b"before the gate" in before
    shown = run_gpumon(tmp_path, "logs", run_id)
    assert shown.returncode == 0 and "after the gate" in shown.stdout, shown.stderr


@pytest.mark.parametrize("name", ["spec.json", "status.json"])
def test_a_link_in_place_of_a_runs_record_is_not_read(tmp_path: Path, name: str) -> None:
    """A run's spec or status replaced by a link to a file outside: listed as unreadable, never read through."""
    (tmp_path / "done.py").write_text("print('done')\n")
    done = run_gpumon(tmp_path, "launch", "script", "done.py")
    run_id = done.stdout.split()[-1]
    assert wait_until(lambda: state(tmp_path, run_id) == "finished", timeout=60, step=0.3)
    run_dir = tmp_path / "home" / "runs" / run_id
    target = outside(tmp_path, (run_dir / name).read_bytes())  # a valid record: reading it would pass unseen
    (run_dir / name).unlink()
    (run_dir / name).symlink_to(target)
    (tmp_path / "home" / "index.sqlite3").unlink()  # read from the run's files, not its indexed row
    listed = json.loads(run_gpumon(tmp_path, "runs", "--json").stdout)["runs"]
    row = next(r for r in listed if r["id"] == run_id)
    assert any(name in why and "a link to" in why for why in row["unreadable"]), row
