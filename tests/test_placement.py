"""Where a run lives is one interface: chosen once from the spec, read back from the run's record."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest

from gpumon.core.placement import places as placement
from gpumon.core.placement.record import name_of
from gpumon.core.runs.record.spec import RunSpec
from gpumon.core.runs.record.store import RunStore
from gpumon.core.runs.supervision import launcher


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RunStore:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path / "home"))
    return RunStore()


def test_the_place_is_read_from_what_the_run_recorded() -> None:
    spec = RunSpec(kind="script", program="train.py")
    assert name_of(spec) == "local"
    assert name_of(RunSpec(kind="script", program="train.py", slurm={"nodes": 1})) == "slurm"
    assert name_of(spec, {"state": "running", "slurm_job_id": "12"}) == "slurm"
    assert name_of(spec, {"state": "queued"}) == "queued"
    assert name_of(RunSpec(kind="ddp", nproc=2, group="g1"), {"state": "running"}) == "nodes"
    assert placement.for_spec(spec).supervised_here and not placement.PLACES["slurm"].supervised_here


def test_a_run_started_here_reads_back_as_local_and_stops_through_its_place(store: RunStore, tmp_path: Path) -> None:
    script = tmp_path / "sleeper.py"
    script.write_text(textwrap.dedent("import time\nprint('up', flush=True)\ntime.sleep(60)\n"))
    record = placement.launch(RunSpec(kind="script", program=str(script)), store, 0, grace_s=5.0)
    place = placement.of_record(record)
    assert place.name == "local" and place.where(record).logs == record.dir / "logs"
    assert placement.command(record.spec, record.id)[-1] == str(script)
    deadline = time.monotonic() + 60  # a loaded machine: the supervisor may still be starting the command
    while record.status.get("state") == "starting" and time.monotonic() < deadline:
        time.sleep(0.1)
        record = record.reread()
    assert placement.stop(record).startswith("stopping ")
    while record.live and time.monotonic() < deadline:
        time.sleep(0.1)
        record = record.reread()
    assert record.state == "stopped"


def test_the_launcher_refuses_a_run_that_lives_elsewhere_before_writing_anything(store: RunStore) -> None:
    spec = RunSpec(kind="script", program="train.py", slurm={"nodes": 1})
    with pytest.raises(ValueError, match="slurm run"):
        launcher.launch(spec, store, 0)
    assert not store.runs_dir.exists() or not any(store.runs_dir.iterdir())
