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


def test_a_supervisor_reads_its_place_from_the_files_and_a_spec_it_cannot_read_is_this_hosts() -> None:
    script = {"kind": "script", "program": "train.py"}
    assert placement.of_files({**script, "slurm": {"nodes": 1}}, {"state": "starting"}).name == "slurm"
    assert placement.of_files(script, {"state": "queued"}).name == "queued"
    assert placement.of_files({}, {"state": "starting"}).name == "local"  # spec.json gone: as a run of this host


def test_every_row_carries_each_places_keys_and_a_queued_run_its_place_in_line(store: RunStore) -> None:
    from gpumon.core.runs.record.store import RunRecord

    spec = RunSpec(kind="script", program="train.py")
    here = RunRecord("r1", store.runs_dir / "r1", spec, {"state": "running"})
    assert placement.row_fields(here) == {"slurm_job_id": None, "slurm_state": None, "slurm_reason": None}
    queued = placement.row_fields(RunRecord("r2", store.runs_dir / "r2", spec, {"state": "queued"}))
    assert queued["slurm_job_id"] is None and queued["queue_position"] is None
    assert queued["queue_reason"] == "waiting for the queue's keeper to look"
