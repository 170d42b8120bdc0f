"""Bounded cost: a run of 2,000,000 steps and 2,000 ended runs cost what a short run and a few runs cost.

Runs are written with the documented event protocol (docs/events.md) and summarised by the supervisor's own
fold (``Supervisor.summarise``), as a live run is. Costs are counted (raw event bytes read, files opened),
never timed.
"""

from __future__ import annotations

import builtins
import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gpumon.cli import main
from gpumon.core import events
from gpumon.core.doctor.report import diagnose
from gpumon.core.events import encode
from gpumon.core.runs.reading.monitor import RunsMonitor
from gpumon.core.runs.reading.telemetry import SUMMARY, RunTelemetry
from gpumon.core.runs.record.index import RunIndex
from gpumon.core.runs.record.spec import RunSpec
from gpumon.core.runs.record.store import RunStore, write_json
from gpumon.core.runs.supervision.supervisor import Supervisor

EVERY = 100  # GPUMON_STEP_EVERY=100: a step event every 100th step (docs/events.md), so 2M steps are 20k events


def write_run(store: RunStore, steps: int, leak: bool = False) -> Path:
    """An ended script run of ``steps`` optimizer steps, its events written as the bootstrap writes them."""
    _, path = store.new_run_dir(RunSpec(kind="script", program="train.py"))
    write_json(path / "spec.json", RunSpec(kind="script", program="train.py").to_dict())
    write_json(path / "command.json", {"argv": ["python", "train.py"], "env": {}, "cwd": str(path)})
    (path / "logs").mkdir()
    (path / "logs" / "rank0.log").write_text("epoch 1\n")
    lines = []
    for step in range(EVERY, steps + 1, EVERY):
        heap = 200_000_000 + (step * 400 if leak else (step // EVERY) % 7 * 1000)
        lines.append(
            encode("step", "rank0", {"step": step, "dev": "cpu", "heap": heap, "rss": 900_000_000}, 1e9 + step)
        )
        lines.append(encode("metrics", "rank0", {"step": step, "metrics": {"loss": 1 / step}}, 1e9 + step))
    (path / "events").mkdir()
    (path / "events" / "rank0.7.jsonl").write_bytes(b"".join(lines))
    supervisor = Supervisor(path)  # its fold and its end, without a process to run
    supervisor.summarise(final=True)
    now = time.time()
    status = {"state": "finished", "created": now - 2, "started": now - 2, "ended": now - 1, "exit_code": 0}
    write_json(path / "status.json", status)
    supervisor.status = status
    from gpumon.core.runs.supervision.ending import index_run

    index_run(path, status, supervisor.fold, supervisor.watch, supervisor.events)
    return path


def raw_bytes_read(action: Callable[[], object]) -> int:
    before = events.BYTES_READ
    action()
    return events.BYTES_READ - before


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RunStore:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path / "home"))
    return RunStore()


def test_a_run_of_two_million_steps_lists_opens_and_diagnoses_without_reading_its_events(store: RunStore) -> None:
    short = write_run(store, 2_000)
    long = write_run(store, 2_000_000, leak=True)
    assert (long / "events" / "rank0.7.jsonl").stat().st_size > 100 * (
        short / "events" / "rank0.7.jsonl"
    ).stat().st_size
    assert (long / SUMMARY).stat().st_size < 200_000  # bounded: min/max/last buckets
    monitor = RunsMonitor(store)
    assert raw_bytes_read(monitor.refresh) == 0
    listed = {s.id: s for s in monitor.refresh()}
    # The supervisor's verdict: growth or leak, as 400 B a step at 1 step/s fills this host's memory within 24 h or not
    assert listed[long.name].step == 2_000_000 and listed[long.name].leaks[0].grows
    for path in (short, long):
        before = events.BYTES_READ
        detail = monitor.summary(path.name)
        diagnosis = diagnose(store.resolve(path.name))
        assert before == events.BYTES_READ  # the summary only, whatever the run's length
        assert detail is not None and 0 < len(detail.loss_values) <= 2_000
        state = diagnosis.leaks[0]  # the detector's verdict (alarm or growth: see the listing above)
        assert (state.trend or state.state) == ("leak" if path == long else "ok")
    assert main(["doctor", long.name, "--json"]) == 0


def test_two_thousand_ended_runs_are_read_once_across_refreshes(
    store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    for _ in range(20):
        write_run(store, 200)
    runs = sorted(store.runs_dir.iterdir())
    for n in range(2_000 - len(runs)):  # copies: the files of 2,000 runs, the index of the first 20
        copy = store.runs_dir / f"script-0101-000000-{n:04x}"
        copy.mkdir()
        for name in ("spec.json", "status.json", SUMMARY):
            (copy / name).write_bytes((runs[n % len(runs)] / name).read_bytes())
    opened: list[str] = []
    real_open = builtins.open
    real_read_text, real_read_bytes = Path.read_text, Path.read_bytes

    def count(path: object) -> bool:
        if str(path).startswith(str(store.runs_dir)):
            opened.append(str(path))
        return True

    monkeypatch.setattr(builtins, "open", lambda f, *a, **k: count(f) and real_open(f, *a, **k))
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: count(self) and real_read_text(self, *a, **k))
    monkeypatch.setattr(Path, "read_bytes", lambda self, *a, **k: count(self) and real_read_bytes(self, *a, **k))
    monitor = RunsMonitor(store)
    assert len(monitor.refresh()) == 2_000
    first = len(opened)
    assert first <= 3 * (2_000 - 20)  # the 1,980 unindexed runs: spec, status and summary, once each
    for _ in range(5):
        monitor.refresh()
    assert len(opened) == first  # nothing re-read
    assert len(RunIndex(store.root).rows()) == 2_000  # indexed as they were read
    opened.clear()
    assert len(RunsMonitor(store).refresh()) == 2_000 and opened == []  # the next gpumon reads the index only


KILLED_WRITER = """
import sys, sqlite3, time
from pathlib import Path
from gpumon.core.runs.record.index import RunIndex
index = RunIndex(Path(sys.argv[1]))
db = index._connect()
db.execute("BEGIN IMMEDIATE")
for n in range(50_000):
    db.execute("INSERT OR REPLACE INTO runs VALUES (?, 0, 1, '{}')", (f"half-{n}",))
print("mid-transaction", flush=True)
time.sleep(60)
"""


def test_the_index_survives_a_writer_killed_mid_transaction(store: RunStore) -> None:
    for _ in range(3):
        write_run(store, 200)
    before = RunIndex(store.root).rows()
    writer = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(store.root)], stdout=subprocess.PIPE, text=True)
    assert writer.stdout is not None and writer.stdout.readline().strip() == "mid-transaction"
    writer.kill()
    writer.wait()
    after = RunIndex(store.root).rows()
    assert after == before and not any(k.startswith("half-") for k in after)
    RunIndex(store.root).put([("x", 0.0, {"spec": {}, "status": {}})])  # and it still takes writes
    with sqlite3.connect(store.root / "index.sqlite3") as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert os.stat(store.root / "index.sqlite3").st_mode & 0o077 == 0
    assert json.loads(json.dumps(after))  # rows are plain JSON


TRAIN = """
import torch
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(400):
    opt.zero_grad()
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
"""


def test_an_ended_runs_raw_events_are_kept_compressed_and_still_readable(store: RunStore, tmp_path: Path) -> None:
    from gpumon.core.events import EventReader
    from gpumon.core.runs.supervision.launcher import launch, wait

    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    spec = RunSpec(kind="script", program=str(script), env=(("GPUMON_STEP_RATE", "0"),))
    final = wait(launch(spec, store, visible_gpus=0), store, timeout=60)
    assert final.state == "finished"
    deadline = time.monotonic() + 20
    while "event_bytes" not in final.status:  # compressed just after the end is written
        assert time.monotonic() < deadline, "the events were never compressed"
        time.sleep(0.1)
        final = store.load(final.dir) or final
    names = [p.name for p in (final.dir / "events").iterdir()]
    assert any(n.startswith("rank0.") and n.endswith(".jsonl.gz") for n in names)
    assert not any(n.startswith("rank0.") and n.endswith(".jsonl") for n in names)
    sizes = final.status["event_bytes"]
    assert sizes["stored"] * 4 < sizes["raw"]  # step events compress well
    steps = [e["step"] for e in EventReader(final.dir).poll() if e["type"] == "step"]
    assert steps == list(range(1, 401))  # every one of them, for whoever wants the raw events
    summary = RunTelemetry(final.dir)
    summary.update()
    assert summary.final and summary.optimizer_steps == 400
    assert RunTelemetry(final.dir, use_summary=False).update() > 400  # folded from the .gz files alone


def test_prune_lists_first_removes_with_yes_and_never_a_live_run(
    store: RunStore, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = [write_run(store, 2_000) for _ in range(4)]
    live_id, live = store.new_run_dir(RunSpec(kind="script", program="train.py"))
    write_json(live / "spec.json", RunSpec(kind="script", program="train.py").to_dict())
    me = __import__("psutil").Process()
    write_json(live / "status.json", {"state": "running", "created": 0.0, "supervisor_pid": me.pid,
                                      "supervisor_create_time": me.create_time()})  # fmt: skip
    assert main(["prune"]) == 2
    assert "--older-than DAYS and/or --keep N" in capsys.readouterr().err
    assert main(["prune", "--keep", "1", "--events"]) == 0  # a dry run
    out = capsys.readouterr().out
    assert "would remove the raw events of 3 runs" in out and live_id not in out
    assert all((p / "events").exists() for p in paths)
    assert main(["prune", "--keep", "1", "--events", "--yes"]) == 0
    assert [(p / "events").exists() for p in paths] == [False, False, False, True]
    listed = {s.id: s for s in RunsMonitor(store).refresh()}
    assert listed[paths[0].name].step == 2_000 and diagnose(store.resolve(paths[0].name)).leaks  # still diagnosable
    assert main(["prune", "--older-than", "0", "--yes"]) == 0  # every ended run, whole
    assert "removed the 4 runs above" in capsys.readouterr().out
    assert [p.name for p in store.runs_dir.iterdir()] == [live_id] and live_id in {
        s.id for s in RunsMonitor(store).refresh()
    }
    assert set(RunIndex(store.root).rows()) == set()
