"""A host's runs travel in its snapshot stream (``--runs N``): sent when they change, merged by the fleet."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from queue import Empty, Queue
from typing import Any

from gpumon.core.fleet.runs_delta import merge_runs, ordered
from tests.test_cli import gpumon_run


class Stream:
    """``gpumon snapshot --json --watch --runs N`` over a state dir of its own; its lines read on a thread."""

    def __init__(self, home: Path, recent: int) -> None:
        env = {**os.environ, "GPUMON_HOME": str(home), "PYTHONDONTWRITEBYTECODE": "1"}
        argv = [sys.executable, "-m", "gpumon", "--simulate", "1", "snapshot", "--json", "--watch"]
        argv += ["--fields", "fleet", "--interval", "0.25", "--runs", str(recent)]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
        self.lines: Queue[dict[str, Any]] = Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.rows: dict[str, dict[str, Any]] = {}
        self.payloads: list[dict[str, Any] | None] = []

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))

    def until(self, predicate: Any, timeout: float = 60.0) -> dict[str, dict[str, Any]]:
        """Lines (merged as the fleet merges them) until ``predicate(rows)`` holds."""
        import time

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                doc = self.lines.get(timeout=1.0)
            except Empty:
                continue
            payload = doc.get("runs")
            self.payloads.append(payload)
            if payload is not None:
                self.rows, error = merge_runs(self.rows, payload)
                assert error is None
            if predicate(self.rows) and payload is not None:
                return self.rows
        raise AssertionError(f"not seen in {timeout} s; rows: {list(self.rows)}")

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def _launch(home: Path, script: Path) -> str:
    env_home = os.environ.get("GPUMON_HOME")
    os.environ["GPUMON_HOME"] = str(home)
    try:
        result = gpumon_run("launch", "script", str(script))
    finally:
        if env_home is None:
            del os.environ["GPUMON_HOME"]
        else:
            os.environ["GPUMON_HOME"] = env_home
    assert result.returncode == 0, result.stderr
    return result.stdout.split()[-1]


def test_a_run_shows_in_the_stream_when_it_starts_and_ends_and_quiet_lines_carry_no_runs(tmp_path: Path) -> None:
    home = tmp_path / "state"
    script = tmp_path / "wait.py"
    script.write_text("import pathlib, time\nend = time.monotonic() + 600\n"  # a failed test leaves no run for good
                      "while not pathlib.Path(__file__).with_suffix('.go').exists() and time.monotonic() < end:\n"
                      "    time.sleep(0.05)\nprint('done')\n")  # fmt: skip
    stream = Stream(home, recent=1)
    try:
        first = stream.lines.get(timeout=30)
        assert "runs" not in first  # the first line waits for no run index: it is the fleet's first frame
        assert stream.until(lambda rows: True) == {}  # then the (empty) full list, once
        run_id = _launch(home, script)
        rows = stream.until(lambda rows: run_id in rows)
        assert rows[run_id]["status"] in ("starting", "running") and rows[run_id]["program"].endswith("wait.py")
        script.with_suffix(".go").touch()
        rows = stream.until(lambda rows: rows.get(run_id, {}).get("status") == "finished")
        assert rows[run_id]["exit_code"] == 0
        assert [stream.lines.get(timeout=10).get("runs") for _ in range(3)] == [None] * 3  # nothing changed

        # --runs 1: a second ended run pushes the first out of the list, which the stream says as "gone"
        script.with_suffix(".go").unlink()
        second = _launch(home, script)
        stream.until(lambda rows: second in rows)
        script.with_suffix(".go").touch()
        rows = stream.until(lambda rows: rows.get(second, {}).get("status") == "finished" and run_id not in rows)
        assert list(rows) == [second]
        assert any(p and run_id in p["gone"] for p in stream.payloads)
    finally:
        stream.close()


def test_a_new_stream_starts_with_every_run_listed_in_full(tmp_path: Path) -> None:
    home = tmp_path / "state"
    script = tmp_path / "hi.py"
    script.write_text("print('hi')\n")
    ids = [_launch(home, script) for _ in range(3)]
    stream = Stream(home, recent=2)
    try:
        rows = stream.until(lambda rows: len(rows) == 2 and all(r["status"] == "finished" for r in rows.values()))
        assert sorted(rows) == sorted(ids[1:])  # the newest two ended runs
        assert next(p for p in stream.payloads if p is not None)["full"] is True
    finally:
        stream.close()


def test_merging_keeps_rows_across_deltas_and_orders_them_as_gpumon_runs_does() -> None:
    rows, error = merge_runs({}, {"full": True, "rows": [{"id": "b", "started": 2.0}, {"id": "a", "started": 1.0}]})
    assert error is None and [r["id"] for r in ordered(rows)] == ["a", "b"]
    rows, _ = merge_runs(rows, {"full": False, "rows": [{"id": "c", "started": 3.0}], "gone": ["a"]})
    assert [r["id"] for r in ordered(rows)] == ["b", "c"]
    kept, error = merge_runs(rows, {"error": "cannot read the runs there: disk I/O error"})
    assert kept == rows and error == "cannot read the runs there: disk I/O error"
    rows, _ = merge_runs(rows, {"full": True, "rows": [{"id": "d"}], "gone": []})  # a new stream: all of them
    assert list(rows) == ["d"]


def test_runs_without_the_stream_is_a_one_line_mistake() -> None:
    result = gpumon_run("snapshot", "--json", "--runs", "3")
    assert result.returncode == 2
    said = "gpumon: error: --runs goes with the stream: gpumon snapshot --json --watch --runs N"
    assert result.stderr.strip() == said


def test_the_monitors_recent_runs_are_what_gpumon_runs_recent_lists(tmp_path: Path, monkeypatch) -> None:
    """The stream's fast walk from the newest end gives the rows `gpumon runs --json --recent N` gives."""
    from gpumon.core.runs.reading.monitor import RunsMonitor
    from gpumon.core.runs.record.listing import recent
    from gpumon.core.runs.record.spec import RunSpec
    from gpumon.core.runs.record.store import RunStore
    from gpumon.core.runs.supervision.launcher import launch
    from tests.test_run_cost import write_run

    monkeypatch.setenv("GPUMON_HOME", str(tmp_path / "home"))
    store = RunStore()
    for _ in range(12):
        write_run(store, 100)
    script = tmp_path / "sleep.py"
    script.write_text("import time\ntime.sleep(60)\n")
    live = launch(RunSpec(kind="script", program=str(script)), store, 0)
    try:
        write_run(store, 100)  # an ended run newer than the live one
        monitor = RunsMonitor()
        every = monitor.refresh()
        for n in (0, 3, 20):
            assert [s.id for s in monitor.recent(n)] == [s.id for s in recent(every, n)]
        assert len(recent(every, 20)) == 14  # fewer ended runs than asked for: all of them (it cut 6 before)
        assert live.id in {s.id for s in monitor.recent(0)}
    finally:
        subprocess.run([sys.executable, "-m", "gpumon", "stop", live.id, "--kill"], capture_output=True, timeout=60)


def test_a_live_run_whose_supervisor_dies_is_sent_as_such(tmp_path: Path, monkeypatch) -> None:
    """The stream tells a host's live run from one whose supervisor died (nothing adopts it here)."""
    import signal
    import time

    from gpumon.core.fleet.runs_delta import RunsDelta
    from gpumon.core.runs.reading.monitor import RunsMonitor
    from gpumon.core.runs.record.spec import RunSpec
    from gpumon.core.runs.record.store import RunStore
    from gpumon.core.runs.supervision.launcher import launch
    from tests.conftest import wait_until

    monkeypatch.setenv("GPUMON_HOME", str(tmp_path / "home"))
    script = tmp_path / "sleep.py"
    script.write_text("import time\ntime.sleep(60)\n")
    run = launch(RunSpec(kind="script", program=str(script)), RunStore(), 0)
    delta = RunsDelta(5, RunsMonitor(adopt=False), live_every=0.2)  # adopt=False: nobody takes it over
    try:
        assert wait_until(lambda: (p := delta.next()) is not None and p["rows"] and p["rows"][0]["status"] == "running"
                          , timeout=30)  # fmt: skip
        os.kill(RunStore().load(run.dir).status["supervisor_pid"], signal.SIGKILL)
        seen: list[str] = []

        def status() -> bool:
            time.sleep(0.05)
            payload = delta.next()
            seen.extend(r["status"] for r in (payload or {}).get("rows", []))
            return "unsupervised" in seen

        assert wait_until(status, timeout=30), seen
    finally:
        subprocess.run([sys.executable, "-m", "gpumon", "stop", run.id, "--kill"], capture_output=True, timeout=60)
