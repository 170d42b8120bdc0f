"""A full or flooded state dir never touches the training: the output pipe, the log cap, metrics' rate."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpumon.core.runs.record.spec import RunSpec
from gpumon.core.runs.record.store import RunRecord, RunStore
from gpumon.core.runs.supervision.launcher import launch
from tests.tmpfs import small_tmpfs

PRINTER = """
import os, sys, time
for i in range(1, 301):
    print(f"line {i} " + "y" * 3000)  # ~900 KB in all: more than the full state dir has
    if i % 50 == 0:
        print(f"err {i}", file=sys.stderr)
    time.sleep(0.01)
open(sys.argv[1], "w").write("trained")  # on the test's own disk
end = time.monotonic() + 600  # a test that failed before its gate never leaves this run behind for good
while not os.path.exists(sys.argv[2]) and time.monotonic() < end:  # the test frees space, then opens this gate
    time.sleep(0.05)
print("after space came back")
"""

FLOOD = """
import os, sys
block = (b"z" * 1023 + b"\\n") * 1024
os.write(1, b"first line of the run\\n")
for _ in range(200):  # 200 MiB
    os.write(1, block)
os.write(1, b"last line of the run\\n")
"""

TORCHRUN_FLOOD = """
import os
rank = os.environ["RANK"]
print(f"rank {rank} starts", flush=True)
block = ("w" * 1023 + "\\n") * 1024
for _ in range(8):  # 8 MiB per rank
    print(block, end="", flush=True)
print(f"rank {rank} ends", flush=True)
"""

METRICS_FLOOD = """
import time
from gpumon import telemetry
end = time.monotonic() + 3
step = 0
while time.monotonic() < end:
    step += 1
    telemetry.log(step=step, loss=1.0 / step, lr=0.1)
telemetry.log(step=step, loss=float("nan"))  # written at once, whatever the rate
print("steps", step)
"""


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "state") as mount:
        yield mount


def wait_end(store: RunStore, record: RunRecord, timeout: float = 120.0) -> RunRecord:
    deadline = time.monotonic() + timeout
    while (loaded := store.load(record.dir)) is None or loaded.live:
        assert time.monotonic() < deadline, f"the run did not end: {loaded and loaded.status}"
        time.sleep(0.2)
    return loaded


def test_a_script_that_prints_into_a_full_state_dir_trains_on_and_finishes(
    tiny_tmpfs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUMON_HOME", str(tiny_tmpfs))
    script, done = tmp_path / "printer.py", tmp_path / "done"
    script.write_text(PRINTER)
    store = RunStore()
    stat = os.statvfs(tiny_tmpfs)
    filler = tiny_tmpfs / "filler"
    filler.write_bytes(b"\0" * (stat.f_bavail * stat.f_frsize - 200 * 1024))  # 200 KiB left for gpumon
    gate = tmp_path / "gate"
    record = launch(RunSpec(kind="script", program=str(script), args=(str(done), str(gate))), store, 0)
    deadline = time.monotonic() + 90
    while not done.exists():  # print() never raised: the output is a pipe, the disk is the supervisor's
        assert time.monotonic() < deadline, f"the script did not get through its prints: {store.load(record.dir)}"
        time.sleep(0.2)
    filler.unlink()  # space comes back before the script's last line
    gate.write_text("go")
    final = wait_end(store, record)
    assert final.state == "finished" and final.exit_code == 0
    log = (record.dir / "logs" / "rank0.log").read_text()
    assert "line 1 " in log and "of output dropped here: the state dir was full" in log
    assert log.rstrip().endswith("after space came back")
    assert oct(os.stat(record.dir / "logs" / "rank0.log").st_mode & 0o777) == "0o600"


TRAINER = """
import sys, time
import torch
from torch.utils.data import DataLoader, TensorDataset
gate = sys.argv[1]
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=4)
for epoch in range(30):  # every hook of the bootstrap runs: rank claim, steps, DataLoader, backward loss
    for x, y in data:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.save(model.state_dict(), gate + ".pt")
print("trained", flush=True)
open(gate + ".done", "w").close()
"""


def test_a_torch_training_loop_trains_on_a_full_state_dir(
    tiny_tmpfs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lightning's bug-report model failed here: the bootstrap's rank claim raised ENOSPC into the script."""
    pytest.importorskip("torch")
    monkeypatch.setenv("GPUMON_HOME", str(tiny_tmpfs))
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    store = RunStore()
    store.root.mkdir(parents=True, exist_ok=True)
    stat = os.statvfs(tiny_tmpfs)
    filler = tiny_tmpfs / "filler"
    filler.write_bytes(b"\0" * (stat.f_bavail * stat.f_frsize - 128 * 1024))  # the run's files and end reserve
    record = launch(RunSpec(kind="script", program=str(script), args=(str(tmp_path / "model"),)), store, 0)
    with open(filler, "ab") as rest, contextlib.suppress(OSError):  # the ranks start on a full disk
        rest.write(b"\0" * (1 << 20))
    done = tmp_path / "model.done"
    deadline = time.monotonic() + 180
    while not done.exists():  # the script trains to its end with nothing written
        assert time.monotonic() < deadline, f"the script did not finish: {store.load(record.dir)}"
        time.sleep(0.2)
    filler.unlink()  # space comes back: the supervisor records the end it kept
    final = wait_end(store, record, timeout=60)
    assert final.state == "finished" and final.exit_code == 0, final.status


def test_a_200_mb_flood_is_capped_keeping_its_head_and_tail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home, config = tmp_path / "home", tmp_path / "config"
    config.mkdir()
    (config / "config.toml").write_text('[runs]\nlog_cap = "4 MiB"\n')
    monkeypatch.setenv("GPUMON_HOME", str(home))
    monkeypatch.setenv("GPUMON_CONFIG_DIR", str(config))
    script = tmp_path / "flood.py"
    script.write_text(FLOOD)
    store = RunStore()
    started = time.monotonic()
    record = launch(RunSpec(kind="script", program=str(script)), store, 0)
    final = wait_end(store, record)
    assert final.state == "finished", final.status
    log = record.dir / "logs" / "rank0.log"
    size = log.stat().st_size
    assert size <= 4 * 1024 * 1024 + 4096, size  # the cap, and two lines of gpumon's own
    text = log.read_bytes()
    assert text.startswith(b"first line of the run\n") and text.endswith(b"last line of the run\n")
    assert b"this log reached its cap (4.0 MiB, [runs] log_cap)" in text
    assert b"of output cut here (log cap 4.0 MiB); the last 512.0 KiB follow" in text
    print(f"200 MiB in {time.monotonic() - started:.1f} s; log {size} bytes")


def test_torchrun_ranks_write_through_the_supervisors_pipes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    home, config = tmp_path / "home", tmp_path / "config"
    config.mkdir()
    (config / "config.toml").write_text('[runs]\nlog_cap = "2 MiB"\n')
    monkeypatch.setenv("GPUMON_HOME", str(home))
    monkeypatch.setenv("GPUMON_CONFIG_DIR", str(config))
    script = tmp_path / "ranks.py"
    script.write_text(TORCHRUN_FLOOD)
    store = RunStore()
    record = launch(RunSpec(kind="script", program=str(script), nproc=2), store, 0, wait_s=30)
    final = wait_end(store, record)
    assert final.state == "finished", final.status
    for rank in (0, 1):
        log = record.dir / "logs" / f"rank{rank}.log"
        text = log.read_bytes()
        assert text.startswith(f"rank {rank} starts\n".encode()) and text.endswith(f"rank {rank} ends\n".encode())
        assert log.stat().st_size <= 2 * 1024 * 1024 + 4096 and b"of output cut here" in text
        assert oct(log.stat().st_mode & 0o777) == "0o600"
    assert not list((record.dir / "logs").glob("*.pipe"))  # the FIFOs go with the run


def _metrics_events(run_dir: Path) -> list[dict]:
    events = []
    for path in run_dir.glob("events/rank0.*"):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as f:
            events += [e for e in map(json.loads, f) if e.get("type") == "metrics"]
    return events


def test_a_telemetry_log_flood_is_written_at_the_step_rate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path / "home"))
    script = tmp_path / "metrics.py"
    script.write_text(METRICS_FLOOD)
    store = RunStore()
    record = launch(RunSpec(kind="script", program=str(script)), store, 0)
    final = wait_end(store, record)
    assert final.state == "finished", final.status
    steps = int((record.dir / "logs" / "rank0.log").read_text().split()[-1])
    events = _metrics_events(record.dir)
    assert steps > 3000, steps  # the flood was one (a loaded machine still logs thousands a second)
    assert 3 <= len(events) <= 3 * 200 + 20, len(events)  # 3 s at 200 a second, at most
    assert events[-1]["step"] == steps and events[-1]["metrics"]["loss"] == "nan"
    assert events[-2]["metrics"]["lr"] == 0.1


CHATTY = """
import sys, time
for i in range(1, 201):
    print(f"line {i} " + "c" * 10000)  # 2 MB in all: more than the pipe holds while nobody drains it
    time.sleep(0.02)
print("the end")
"""


def test_a_sigkilled_supervisor_and_runner_leave_the_output_pipe_open_for_its_adopter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import signal

    monkeypatch.setenv("GPUMON_HOME", str(tmp_path / "home"))
    script = tmp_path / "chatty.py"
    script.write_text(CHATTY)
    store = RunStore()
    record = launch(RunSpec(kind="script", program=str(script)), store, 0)
    log = record.dir / "logs" / "rank0.log"
    deadline = time.monotonic() + 60
    while log.stat().st_size < 100_000:
        assert time.monotonic() < deadline, "the run never printed"
        time.sleep(0.05)
    os.kill(int(record.status["supervisor_pid"]), signal.SIGKILL)
    os.kill(int(record.status["runner_pid"]), signal.SIGKILL)  # and the command's parent, which drains the pipe
    time.sleep(1.0)  # the script prints on with nobody draining: no EPIPE, it waits in the pipe
    loaded = store.load(record.dir)
    assert loaded is not None and loaded.state == "unsupervised"
    from gpumon.core.runs.reading.monitor import RunsMonitor

    RunsMonitor(store, adopt=True).refresh()  # what `gpumon runs` and the app do: adopt it
    final = wait_end(store, record)
    assert final.state == "exited", final.status  # adopted with its runner dead too: the exit code is unknown
    text = log.read_text()
    assert "line 200 " in text and text.rstrip().endswith("the end")
    assert "Error" not in text  # no BrokenPipeError in the run


RESTARTED = """
import os, pathlib, sys, time
attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
print(f"rank {os.environ['RANK']} attempt {attempt}", flush=True)
printed = pathlib.Path(sys.argv[0]).with_name("rank0-printed")
if attempt == "0" and os.environ["RANK"] == "0":
    printed.touch()
if attempt == "0" and os.environ["RANK"] == "1":
    deadline = time.monotonic() + 60
    while not printed.exists() and time.monotonic() < deadline:  # under load rank 0 may not have started yet
        time.sleep(0.05)
    sys.exit(3)  # torchrun restarts every worker once
"""


def test_restarted_torchrun_ranks_write_on_into_their_logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path / "home"))
    script = tmp_path / "restarted.py"
    script.write_text(RESTARTED)
    store = RunStore()
    spec = RunSpec(kind="script", program=str(script), nproc=2, max_restarts=1)
    record = launch(spec, store, 0, wait_s=30)
    final = wait_end(store, record)
    assert final.state == "finished", final.status
    for rank in (0, 1):
        text = (record.dir / "logs" / f"rank{rank}.log").read_text()
        assert f"rank {rank} attempt 0" in text and f"rank {rank} attempt 1" in text, text


FILLER_RUN = """
print("first line", flush=True)
for i in range(400):
    print(f"line {i} " + "x" * 3000, flush=True)  # ~1.2 MB: more than the state dir has left
print("last line", flush=True)
"""


def test_a_run_that_ends_on_a_full_state_dir_reads_finished_and_says_what_was_dropped(
    tiny_tmpfs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk stays full after the run exits 0: its end is written at once (not when space comes back), its
    status counts the dropped bytes per log, and its log ends saying how much was dropped."""
    monkeypatch.setenv("GPUMON_HOME", str(tiny_tmpfs))
    script = tmp_path / "filler_run.py"
    script.write_text(FILLER_RUN)
    store = RunStore()
    stat = os.statvfs(tiny_tmpfs)
    (tiny_tmpfs / "filler").write_bytes(b"\0" * (stat.f_bavail * stat.f_frsize - 700 * 1024))
    record = launch(RunSpec(kind="script", program=str(script)), store, 0)
    final = wait_end(store, record, timeout=90)  # before: 'running' until space came back (24 h at most)
    assert final.state == "finished" and final.exit_code == 0, final.status
    dropped = final.status.get("output_dropped")
    assert isinstance(dropped, dict) and dropped.get("rank0.log", 0) > 100_000, final.status
    log = (record.dir / "logs" / "rank0.log").read_text()
    assert "first line" in log
    assert log.rstrip().splitlines()[-1].startswith("[gpumon: ") and "dropped" in log.rstrip().splitlines()[-1]
    assert not (record.dir / ".end-reserve").exists()
    from gpumon.core.doctor.report import diagnose

    found = diagnose(final)  # the doctor says it, not "no problem seen"
    assert found.headline().startswith("output dropped: the state dir was full (") and "rank0.log" in found.headline()
    assert any(a.key == "state_dir_full" for a in found.advice)
