"""The event protocol: what writers append is what readers get, and bad lines never stop a reader."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gpumon import telemetry
from gpumon.core.events import VERSION, EventReader, EventWriter, encode, parse
from gpumon.core.runs.reading.telemetry import RunTelemetry


def test_written_events_come_back_in_time_order_with_protocol_fields(tmp_path: Path) -> None:
    a = EventWriter(tmp_path, "rank0")
    b = EventWriter(tmp_path, "launcher")
    a.write("metrics", step=1, metrics={"loss": 2.5})
    b.write("run_start", argv=["python", "x.py"])
    a.write("metrics", step=2, metrics={"loss": 2.0})
    events = EventReader(tmp_path).poll()
    assert [e["type"] for e in events] == ["metrics", "run_start", "metrics"]
    assert all(e["v"] == VERSION and e["pid"] == os.getpid() for e in events)
    assert [e["src"] for e in events] == ["rank0", "launcher", "rank0"]


def test_reader_returns_only_new_events_and_waits_for_an_unfinished_line(tmp_path: Path) -> None:
    w = EventWriter(tmp_path, "rank0")
    reader = EventReader(tmp_path)
    w.write("note", text="one")
    assert [e["text"] for e in reader.poll()] == ["one"]
    assert reader.poll() == []
    line = encode("note", "rank0", {"text": "two"})
    with open(w.path, "ab") as fh:  # a writer caught mid-line
        fh.write(line[:10])
    assert reader.poll() == []
    with open(w.path, "ab") as fh:
        fh.write(line[10:])
    assert [e["text"] for e in reader.poll()] == ["two"]


def test_unparseable_lines_are_skipped_and_counted_never_fatal(tmp_path: Path) -> None:
    w = EventWriter(tmp_path, "rank0")
    w.write("note", text="before")
    with open(w.path, "ab") as fh:
        fh.write(b"not json\n")
        fh.write(b'{"v": 99, "type": "future", "t": 1}\n')  # a version this reader does not know
        fh.write(b"[1, 2]\n")
        fh.write(b"\xff\xfe\n")
    w.write("note", text="after")
    reader = EventReader(tmp_path)
    assert [e["text"] for e in reader.poll()] == ["before", "after"]
    assert reader.skipped == 4


def test_values_become_plain_json_nan_and_numpy_like_scalars_included(tmp_path: Path) -> None:
    class Scalar:  # what numpy scalars and 0-d tensors offer
        def item(self) -> float:
            return 0.25

    line = encode("metrics", "rank0", {"metrics": {"loss": float("nan"), "lr": Scalar(), "tag": object}})
    event = parse(line)
    assert event is not None
    assert event["metrics"]["loss"] == "nan"
    assert event["metrics"]["lr"] == 0.25
    assert isinstance(event["metrics"]["tag"], str)


def test_each_process_writes_its_own_file(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from gpumon.core.events import EventWriter\n"
        "EventWriter(sys.argv[1], 'rank0').write('note', text='child')\n"
    )
    EventWriter(tmp_path, "rank0").write("note", text="parent")
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True)
    files = EventReader(tmp_path).files()
    assert len(files) == 2
    assert sorted(e["text"] for e in EventReader(tmp_path).poll()) == ["child", "parent"]


def test_telemetry_is_a_no_op_outside_a_run(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("GPUMON_RUN_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    telemetry.configure(None)
    assert not telemetry.enabled()
    telemetry.log(step=1, loss=1.0)  # must not raise or write anywhere
    telemetry.note("nothing")
    assert telemetry.writer() is None
    assert list(tmp_path.iterdir()) == []


def test_telemetry_log_reaches_the_run_view(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("GPUMON_RUN_DIR", str(tmp_path))
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("GPUMON_STEP_RATE", "0")  # every call written (at the default rate these 3 merge)
    telemetry.configure(None)
    try:
        for step, loss in enumerate([2.0, 1.5, 1.0], start=1):
            telemetry.log(step=step, loss=loss, samples_per_s=100.0)
        telemetry.note("hello")
    finally:
        telemetry.configure(None)
    tele = RunTelemetry(tmp_path)
    assert tele.update() == 5  # proc_start (it reported: it is a rank), 3 metrics, the note
    assert tele.step == 3
    assert tele.loss.values == [2.0, 1.5, 1.0]
    assert tele.samples_per_s == 100.0
    assert tele.notes == ["hello"]
    assert json.loads(next((tmp_path / "events").iterdir()).read_text().splitlines()[0])["src"] == "rank1"


def test_the_run_curve_is_the_lowest_ranks_even_when_another_rank_reports_first(tmp_path: Path) -> None:
    from gpumon.core.events import parse

    tele = RunTelemetry(tmp_path)
    for t, rank, step, loss in [(1.0, 1, 1, 9.0), (1.1, 0, 1, 2.0), (1.2, 1, 2, 8.0), (1.3, 0, 2, 1.0)]:
        event = parse(encode("metrics", f"rank{rank}", {"step": step, "metrics": {"loss": loss}}, now=t))
        assert event is not None
        tele.apply(event)
    assert tele.loss.values == [2.0, 1.0]
    assert tele.metrics == {"loss": 1.0}


def test_a_file_compressed_between_the_listing_and_the_read_is_read_from_its_copy(tmp_path: Path) -> None:
    """The supervisor gzips the ranks' files after writing the run's end: a reader that listed the plain file
    just before must read the copy, not lose the rank (a 2-rank accelerate run lost rank 1 so in CI)."""
    from gpumon.core.events import compress_closed

    for rank in (0, 1):
        w = EventWriter(tmp_path, f"rank{rank}")
        w.write("metrics", step=1, metrics={"loss": 1.0 + rank})
        w.close()

    class Listed(EventReader):
        listing: list[Path] = []

        def files(self) -> list[Path]:
            return self.listing  # the listing taken before the compression

    reader = Listed(tmp_path)
    Listed.listing = EventReader(tmp_path).files()
    assert [p.name.endswith(".jsonl") for p in Listed.listing] == [True, True]
    compress_closed(tmp_path)
    assert sorted(e["src"] for e in reader.poll()) == ["rank0", "rank1"]
    Listed.listing = EventReader(tmp_path).files()  # the copies now: nothing read twice
    assert reader.poll() == []
