"""A run's guard never hurts it: whatever happens to its supervisor (SIGKILL, SIGSTOP) or to its directory
(deleted while it trains), the run's output keeps flowing, its exit code is recorded, and `gpumon stop` ends
it. Real runs through the CLI, real signals."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from subprocess import CompletedProcess

import psutil
import pytest

from tests.conftest import wait_until
from tests.tmpfs import small_tmpfs

Gpumon = Callable[..., CompletedProcess[str]]
LIVE = ("starting", "running", "stalled", "stopping", "unsupervised")

PRINTER = """
import os, sys, time
count, block = sys.argv[1], "p" * 65535
end = time.monotonic() + 600  # a test that failed before its go file never leaves this run behind for good
for i in range(1, 100_000):
    print(f"{i} {block}")  # 64 KiB a line: the output pipe (1 MiB) is full after 16 lines nobody drains
    with open(count + ".tmp", "w") as fh:
        fh.write(str(i))
    os.replace(count + ".tmp", count)
    # the test's signal comes mid-flood, whatever the load
    while i == 5 and not os.path.exists(count + ".go") and time.monotonic() < end:
        time.sleep(0.01)
    time.sleep(0.002)
"""

GATED = """
import os, sys, time
end = time.monotonic() + 600  # a test that failed before its gate never leaves this run behind for good
while not os.path.exists(sys.argv[1]) and time.monotonic() < end:
    time.sleep(0.05)
print("leaving with", sys.argv[2], flush=True)
sys.exit(int(sys.argv[2]))
"""

SLEEPER = """
import time
for i in range(6000):
    print("tick", i, flush=True)
    time.sleep(0.1)
"""


def rows(gpumon: Gpumon) -> dict[str, dict]:
    done = gpumon("runs", "--json")
    assert done.returncode == 0, done.stderr
    return {r["id"]: r for r in json.loads(done.stdout)["runs"]}


def launch(gpumon: Gpumon, tmp_path: Path, text: str, *args: str) -> tuple[str, Path, psutil.Process]:
    """A run of ``text`` once it runs: its id, its directory and its supervisor."""
    script = tmp_path / "script.py"
    script.write_text(text)
    done = gpumon("launch", "script", str(script), "--", *args)
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split()[-1]
    run_dir = tmp_path / "home" / "runs" / run_id
    assert wait_until(lambda: rows(gpumon)[run_id]["status"] == "running", timeout=60, step=0.3)
    status = json.loads((run_dir / "status.json").read_text())
    return run_id, run_dir, psutil.Process(status["supervisor_pid"])


def script_of(supervisor: psutil.Process, tmp_path: Path) -> psutil.Process:
    script = str(tmp_path / "script.py")
    assert wait_until(lambda: [p for p in supervisor.children(recursive=True) if script in p.cmdline()], timeout=30)
    [proc] = [p for p in supervisor.children(recursive=True) if script in p.cmdline()]
    return proc


def gone(proc: psutil.Process) -> bool:
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def counted(path: Path) -> int:
    try:
        return int(path.read_text() or 0)
    except (OSError, ValueError):
        return 0


@pytest.fixture
def leftovers(tmp_path: Path) -> Iterator[list[psutil.Process]]:
    """Whatever a test leaves running (a stopped supervisor, the run's processes) is killed at its end."""
    procs: list[psutil.Process] = []
    yield procs
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()  # SIGKILL also ends a SIGSTOPped process
    home = str(tmp_path / "home")
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("GPUMON_RUN_DIR", "").startswith(home) or home in " ".join(proc.cmdline()):
                proc.kill()
        except psutil.Error:
            continue


@pytest.mark.parametrize(
    ("whom", "sig"),
    [("supervisor", signal.SIGKILL), ("supervisor", signal.SIGSTOP), ("runner", signal.SIGKILL)],
    ids=["supervisor SIGKILL", "supervisor SIGSTOP", "runner SIGKILL"],
)
def test_a_printing_script_trains_on_whatever_happens_to_its_supervisor_or_runner(
    gpumon: Gpumon, tmp_path: Path, leftovers: list[psutil.Process], whom: str, sig: signal.Signals
) -> None:
    count = tmp_path / "count"
    _, run_dir, supervisor = launch(gpumon, tmp_path, PRINTER, str(count))
    leftovers.append(supervisor)
    assert wait_until(lambda: counted(count) >= 5, timeout=60)
    # Line 5 waits for this: a test slow to get here (a loaded machine) let the script print past the log's
    # 64 MiB cap first, and what is past the cap stays in memory until the run ends (at line 2492 of 896 kept).
    (tmp_path / "count.go").touch()
    # the runner (the command's parent, which drains the pipe) dying is the supervisor's to make up for
    target = supervisor.pid if whom == "supervisor" else json.loads((run_dir / "status.json").read_text())["runner_pid"]
    os.kill(target, sig)
    at = counted(count)
    # no gpumon command looks meanwhile (it would adopt the run): the script alone must get 12 MiB out
    assert wait_until(lambda: counted(count) >= at + 200, timeout=90, step=0.1), (
        f"the script froze at line {counted(count)} after its {whom} got {sig.name} at line {at}"
    )
    log = run_dir / "logs" / "rank0.log"
    with open(log, "rb") as fh:  # what it printed reached its log (not dropped)
        fh.seek(max(0, log.stat().st_size - 256 * 1024))
        lines = [line.split(b" ", 1)[0] for line in fh.read().splitlines()]
    assert max(int(n) for n in lines if n.isdigit()) >= at + 150


def test_stop_ends_a_run_whose_supervisor_is_sigstopped(
    gpumon: Gpumon, tmp_path: Path, leftovers: list[psutil.Process]
) -> None:
    run_id, _, supervisor = launch(gpumon, tmp_path, SLEEPER)
    leftovers.append(supervisor)
    script = script_of(supervisor, tmp_path)
    os.kill(supervisor.pid, signal.SIGSTOP)
    assert wait_until(lambda: supervisor.status() == psutil.STATUS_STOPPED, timeout=10)
    assert rows(gpumon)[run_id]["status"] == "unsupervised"  # not "running": nothing watches it
    started = time.monotonic()
    done = gpumon("stop", run_id)
    took = time.monotonic() - started
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert gone(script), "gpumon stop left the run's script running"
    assert took < 15, f"stop took {took:.1f} s"
    assert rows(gpumon)[run_id]["status"] == "stopped"
    assert gone(supervisor)  # resumed later, it would act on a run that ended


@pytest.mark.parametrize("code", [0, 7])
@pytest.mark.parametrize("when", ["ended before anyone looked", "adopted"])
def test_a_run_whose_supervisor_was_killed_keeps_its_exit_code(
    gpumon: Gpumon, tmp_path: Path, leftovers: list[psutil.Process], code: int, when: str
) -> None:
    gate = tmp_path / "gate"
    run_id, run_dir, supervisor = launch(gpumon, tmp_path, GATED, str(gate), str(code))
    family = supervisor.children(recursive=True)
    leftovers.extend(family)
    os.kill(supervisor.pid, signal.SIGKILL)
    assert wait_until(lambda: gone(supervisor), timeout=30)
    if when == "adopted":  # a gpumon looks while the script runs: it adopts the run
        assert rows(gpumon)[run_id]["status"] in ("unsupervised", "running")
        status = run_dir / "status.json"
        assert wait_until(lambda: "adopted" in json.loads(status.read_text() or "{}"), timeout=60, step=0.2)
        gate.touch()
    else:  # nobody looks until every process the supervisor left has ended
        gate.touch()
        _, alive = psutil.wait_procs(family, timeout=60)
        assert not alive, alive
    assert wait_until(lambda: rows(gpumon)[run_id]["status"] not in LIVE, timeout=90, step=0.3)
    row = rows(gpumon)[run_id]
    assert (row["status"], row["exit_code"]) == ("finished" if code == 0 else "failed", code), row
    if code == 0:  # a run after it starts: its dependency finished
        quick = tmp_path / "after.py"
        quick.write_text("print('after')\n")
        done = gpumon("launch", "script", str(quick), "--queue", "--after", run_id)
        assert done.returncode == 0, done.stderr
        after = done.stdout.split()[-1]
        assert wait_until(lambda: rows(gpumon)[after]["status"] not in (*LIVE, "queued"), timeout=90, step=0.5)
        assert rows(gpumon)[after]["status"] == "finished", rows(gpumon)[after]


def delete(run_dir: Path) -> None:
    """rm -rf while the run writes into it."""
    assert wait_until(lambda: shutil.rmtree(run_dir, ignore_errors=True) or not run_dir.exists(), timeout=10)


def test_stop_finds_and_ends_a_run_whose_directory_was_deleted(
    gpumon: Gpumon, tmp_path: Path, leftovers: list[psutil.Process]
) -> None:
    run_id, run_dir, supervisor = launch(gpumon, tmp_path, SLEEPER)
    script = script_of(supervisor, tmp_path)
    leftovers.extend([supervisor, script])
    delete(run_dir)
    done = gpumon("stop", run_id)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert f"stopped {run_id} (its directory was deleted)" in done.stdout
    assert "did not end on SIGTERM" not in done.stdout  # its supervisor honoured SIGTERM
    assert gone(script) and gone(supervisor)


@pytest.mark.parametrize("how", ["SIGTERM", "the script ends"])
def test_a_supervisor_whose_run_directory_was_deleted_ends_promptly(
    gpumon: Gpumon, tmp_path: Path, leftovers: list[psutil.Process], how: str
) -> None:
    gate = tmp_path / "gate"
    _, run_dir, supervisor = launch(gpumon, tmp_path, GATED, str(gate), "0")
    script = script_of(supervisor, tmp_path)
    leftovers.extend([supervisor, script])
    delete(run_dir)
    if how == "SIGTERM":
        os.kill(supervisor.pid, signal.SIGTERM)  # as `kill PID` or a shutdown would
    else:
        gate.touch()
    assert wait_until(lambda: gone(script), timeout=30)
    assert wait_until(lambda: gone(supervisor), timeout=30), "the supervisor waits for a deleted dir"


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "home") as mount:
        yield mount


def test_a_supervisor_holding_its_end_for_disk_space_ends_on_sigterm(
    tiny_tmpfs: Path, gpumon: Gpumon, tmp_path: Path, leftovers: list[psutil.Process]
) -> None:
    gate = tmp_path / "gate"
    _, run_dir, supervisor = launch(gpumon, tmp_path, GATED, str(gate), "0")
    leftovers.append(supervisor)
    # no reserve for its end (one that could not be made): only then does its end wait for space
    assert wait_until(lambda: (run_dir / ".end-reserve").exists(), timeout=30)
    (run_dir / ".end-reserve").unlink()
    stat = os.statvfs(tiny_tmpfs)
    filler = tiny_tmpfs / "filler"
    filler.write_bytes(b"\0" * (stat.f_bavail * stat.f_frsize - 64 * 1024))
    with open(filler, "ab") as rest, contextlib.suppress(OSError):  # the state dir is full
        rest.write(b"\0" * (1 << 20))
    gate.touch()
    assert wait_until(lambda: not supervisor.children(recursive=True), timeout=60)  # the run ended, all of it
    assert json.loads((run_dir / "status.json").read_text())["state"] == "running"  # its end waits for space
    assert supervisor.is_running()
    os.kill(supervisor.pid, signal.SIGTERM)
    assert wait_until(lambda: gone(supervisor), timeout=15), "the supervisor ignored SIGTERM"


def test_a_run_that_ends_while_its_supervisor_is_stopped_reads_as_its_runner_recorded_it(
    gpumon: Gpumon, tmp_path: Path, leftovers: list[psutil.Process]
) -> None:
    """Issue 49 item 5: it read ``unsupervised`` for ever, its elapsed time grew, and a later ``stop`` recorded a
    finished run as stopped by the user."""
    gate = tmp_path / "gate"
    run_id, run_dir, supervisor = launch(gpumon, tmp_path, GATED, str(gate), "0")
    leftovers.extend([supervisor, *supervisor.children(recursive=True)])
    os.kill(supervisor.pid, signal.SIGSTOP)
    assert wait_until(lambda: supervisor.status() == psutil.STATUS_STOPPED, timeout=10)
    gate.touch()
    assert wait_until(lambda: rows(gpumon)[run_id]["status"] == "finished", timeout=60, step=0.3), rows(gpumon)
    row = rows(gpumon)[run_id]
    assert row["exit_code"] == 0 and row["ended"] is not None
    exit_record = json.loads((run_dir / "exit.json").read_text())
    assert row["ended"] == exit_record["ended"]  # its elapsed time stops at its end
    before = (run_dir / "status.json").read_bytes()
    done = gpumon("stop", run_id)
    assert done.returncode == 0 and f"{run_id} is not running (finished)" in done.stdout, (done.stdout, done.stderr)
    assert (run_dir / "status.json").read_bytes() == before  # the stop changed nothing
    os.kill(supervisor.pid, signal.SIGCONT)  # resumed, the supervisor records the same end
    assert wait_until(lambda: json.loads((run_dir / "status.json").read_text()).get("state") == "finished", 60)
    assert rows(gpumon)[run_id]["exit_code"] == 0


@pytest.mark.parametrize(("code", "state"), [("0", "finished"), ("3", "failed")])
def test_a_run_whose_directory_was_deleted_keeps_its_end_in_the_list_with_why(
    gpumon: Gpumon, tmp_path: Path, leftovers: list[psutil.Process], code: str, state: str
) -> None:
    """Issue 49 item 6: its end was recorded nowhere and it vanished from ``gpumon runs``."""
    gate = tmp_path / "gate"
    run_id, run_dir, supervisor = launch(gpumon, tmp_path, GATED, str(gate), code)
    leftovers.extend([supervisor, script_of(supervisor, tmp_path)])
    delete(run_dir)
    gate.touch()
    assert wait_until(lambda: gone(supervisor), timeout=30)
    row = rows(gpumon).get(run_id)
    assert row is not None, "the run vanished from gpumon runs"
    assert (row["status"], row["exit_code"]) == (state, int(code)) and row["ended"] is not None, row
    assert "directory was deleted" in row["error"]["message"]
    table = gpumon("runs").stdout
    assert f"{run_id} {state}: its directory was deleted while it ran" in table, table
