"""No run escapes: a run whose supervisor was killed is shown unsupervised, stopped to the last process, adopted."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from gpumon.cli import main
from gpumon.core.runs.reading.monitor import RunsMonitor
from gpumon.core.runs.reading.telemetry import RunTelemetry
from gpumon.core.runs.record.index import RunIndex
from gpumon.core.runs.record.spec import RunSpec
from gpumon.core.runs.record.store import RunRecord, RunStore, write_json
from gpumon.core.runs.supervision.launcher import launch
from tests.test_launcher import SLEEPER, alive, wait_for


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RunStore:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path / "home"))
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    return RunStore()


def orphan(store: RunStore, *args: str, nproc: int = 1) -> RunRecord:
    """A run whose supervisor was SIGKILLed once its ranks were up (the OOM killer's or an admin's kill)."""
    script = store.root.parent / "sleeper.py"
    record = launch(RunSpec(kind="script", program=str(script), args=args, nproc=nproc), store, visible_gpus=0)
    ranks = [record.log_path(r) for r in range(nproc)]
    wait_for(lambda: all(p.exists() and "up" in p.read_text() for p in ranks))
    wait_for(lambda: len((store.load(record.dir) or record).status.get("procs") or ()) >= nproc)  # written down
    supervisor = record.status["supervisor_pid"]
    os.kill(supervisor, signal.SIGKILL)
    wait_for(lambda: not alive({supervisor}))
    loaded = store.load(record.dir)
    assert loaded is not None
    return loaded


def test_twenty_orphaned_runs_read_unsupervised_and_stop_leaves_nothing(
    store: RunStore, capsys: pytest.CaptureFixture[str]
) -> None:
    for _ in range(20):
        record = orphan(store, "60")
        pids = set(record.live_processes())
        assert record.state == "unsupervised" and record.live and pids
        assert main(["stop", record.id]) == 0
        out = capsys.readouterr().out
        assert "its supervisor was gone" in out and out.strip().endswith(f"stopped {record.id}")
        assert not alive(pids)
        final = store.load(record.dir)
        assert final is not None and final.state == "stopped" and not final.live_processes()
        assert main(["stop", record.id]) == 0  # really over: said so, exit 0
        assert f"{record.id} is not running (stopped)" in capsys.readouterr().out


def test_a_torchrun_run_with_two_ranks_is_stopped_to_the_last_process(
    store: RunStore, capsys: pytest.CaptureFixture[str]
) -> None:
    record = orphan(store, "60", "ignore-term", nproc=2)  # the ranks ignore SIGTERM: SIGKILL must follow
    pids = set(record.live_processes())
    assert record.state == "unsupervised" and len(pids) >= 3  # torchrun and both ranks
    assert main(["stop", record.id]) == 0
    assert "sent SIGKILL" in capsys.readouterr().out
    assert not alive(pids)


def test_a_reused_pid_is_never_taken_for_a_run_process(store: RunStore) -> None:
    record = orphan(store, "60")
    pid = record.status["pid"]
    os.kill(pid, signal.SIGKILL)
    # the run has ended: its main process and its runner (which ends what the command left, then exits)
    wait_for(lambda: not alive({pid, record.status["runner_pid"]}))
    # Our own pid, with another start time: a process that took a run's pid after the run's ended.
    status = {**record.status, "pid": os.getpid(), "procs": [[os.getpid(), 1.0]]}
    write_json(record.dir / "status.json", status)
    reused = store.load(record.dir)
    assert reused is not None and reused.live_processes() == [] and reused.state == "lost"
    assert main(["stop", record.id]) == 0  # nothing to stop, and this test process was not signalled


def test_the_next_gpumon_adopts_an_unsupervised_run_and_records_its_end(store: RunStore) -> None:
    record = orphan(store, "3")
    monitor = RunsMonitor(store, adopt=True)
    assert {s.id: s.state for s in monitor.refresh()}[record.id] == "unsupervised"
    wait_for(lambda: (store.load(record.dir) or record).supervisor_alive(), timeout=10)  # the adopter took it
    wait_for(lambda: (store.load(record.dir) or record).status.get("state") == "finished", timeout=20)
    final = store.load(record.dir)
    assert final is not None and final.exit_code == 0 and final.status.get("adopted")  # its runner's record
    assert RunTelemetry(record.dir).final or _final(record)  # the adopter wrote the last summary
    wait_for(lambda: record.id in RunIndex(store.root).rows(), timeout=5)  # written just after the status
    assert RunIndex(store.root).rows()[record.id]["status"]["state"] == "finished"
    assert {s.id: s.state for s in RunsMonitor(store).refresh()}[record.id] == "finished"


def test_a_run_whose_processes_died_with_its_supervisor_is_recorded_lost(store: RunStore) -> None:
    record = orphan(store, "60")
    os.kill(record.status["runner_pid"], signal.SIGKILL)  # everything: the command's parent too (no exit.json)
    os.killpg(record.status["pgid"], signal.SIGKILL)
    wait_for(lambda: not record.live_processes())
    summaries = {s.id: s for s in RunsMonitor(store, adopt=True).refresh()}
    assert summaries[record.id].state == "lost"
    final = store.load(record.dir)
    assert final is not None and final.status["state"] == "lost" and final.ended is not None
    assert RunIndex(store.root).rows()[record.id]["status"]["state"] == "lost"


def _final(record: RunRecord) -> bool:
    tele = RunTelemetry(record.dir)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        tele.update(events=False)
        if tele.final:
            return True
        time.sleep(0.1)
    return False
