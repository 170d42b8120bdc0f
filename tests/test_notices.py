"""The app's notices (gpumon/tui/notices.py): an alert of no run (a fleet host down) is a toast whatever
shows, once; what was there when the app opened, and a run's alert (told with its run), are not."""

from __future__ import annotations

import time
from pathlib import Path

from textual.app import App

from gpumon.core.alerts.history import AlertEntry
from gpumon.core.events import EventWriter
from gpumon.core.runs.reading.summary import RunSummary, summarise
from gpumon.core.runs.reading.telemetry import RunTelemetry, save_summary
from gpumon.core.runs.record.spec import RunSpec
from gpumon.core.runs.record.store import RunRecord
from gpumon.tui.notices import Notices


def entry(id: str, run: str | None, text: str) -> AlertEntry:
    return AlertEntry(id, "host_down", text, time.time(), run, None, "gpu7", ("desktop",))


async def test_a_host_alert_that_comes_while_the_app_is_open_is_one_literal_toast() -> None:
    app: App[None] = App()
    async with app.run_test() as pilot:
        notices = Notices(app)
        old = entry("a1", None, "down since [yesterday]")
        notices.host_alerts([old])  # the first read only counts
        new, of_run = entry("a2", None, "down: ssh [timed out]"), entry("a3", "run-1", "failed")
        notices.host_alerts([new, of_run, old])
        notices.host_alerts([new, of_run, old])
        await pilot.pause()
        toasts = [(str(n.message), n.title, n.markup) for n in app._notifications]
        assert toasts == [("gpu7: down: ssh [timed out]", "gpumon alert: host_down", False)]


def ended(id: str, state: str, alerts: tuple[str, ...], at: float) -> RunSummary:
    status = {"state": state, "created": at - 5, "started": at - 4, "ended": at, "exit_code": 1 if alerts else 0}
    record = RunRecord(id, Path("/nonexistent") / id, RunSpec("script", program="train.py"), status)
    return RunSummary(record, None, None, None, None, "", 0, 0, (), (), {}, None, alerts=alerts)


async def test_a_run_that_ends_between_the_apps_opening_and_its_first_read_is_told() -> None:
    """A start of seconds on a busy machine: a run that failed or finished meanwhile was counted as old (in CI
    the doctor's failure toast never came). What ended before the app opened still is not told."""
    app: App[None] = App()
    async with app.run_test() as pilot:
        before = time.time() - 30
        notices = Notices(app)
        failed = ("leak: rank 0 grows 3 MiB a step", "failed: the script exited with status 1: bad config")
        runs = [ended("old-fail", "failed", failed, before), ended("old-ok", "finished", (), before)]
        runs += [ended("new-fail", "failed", failed, time.time() + 1), ended("new-ok", "finished", (), time.time() + 1)]
        notices.run_alerts(runs)  # the first read
        notices.finished(runs)
        notices.run_alerts(runs)  # read again: told once
        notices.finished(runs)
        await pilot.pause()
        toasts = sorted(str(n.message) for n in app._notifications)
        assert toasts == [
            "new-fail: failed: the script exited with status 1: bad config",
            "new-ok finished after 4s (exit code 0)",
        ]


async def test_a_runs_alert_past_its_twentieth_is_still_told(tmp_path: Path) -> None:
    """A summary keeps a run's last 20 alerts: counted by length, the 21st and every later one (a week of stalls)
    was never told. Folded from real alert events through summary.json, as the app reads a live run."""
    events = EventWriter(tmp_path, "launcher")
    for n in range(25):
        events.write("alert", text=f"stalled: no step for 10 min ({n + 1})", kind="stalled")
    supervisor = RunTelemetry(tmp_path)  # the supervisor's fold, saved for every reader
    supervisor.update()
    save_summary(supervisor)
    record = RunRecord("long", tmp_path, RunSpec("script", program="train.py"), {"state": "running"})

    def read() -> RunSummary:
        reader = RunTelemetry(tmp_path)  # the app's: from summary.json, then the events after it
        reader.update()
        return summarise(record, reader)

    app: App[None] = App()
    async with app.run_test() as pilot:
        notices = Notices(app)
        first = read()
        assert len(first.alerts) == 20 and first.alert_count == 25
        notices.run_alerts([first])  # the first read only counts
        events.write("alert", text="stalled: no step for 10 min (26)", kind="stalled")
        notices.run_alerts([read()])
        notices.run_alerts([read()])  # told once
        await pilot.pause()
        assert [str(n.message) for n in app._notifications] == ["long: stalled: no step for 10 min (26)"]


async def test_an_alert_raised_while_the_app_opens_is_told_and_one_from_before_is_not(tmp_path: Path) -> None:
    """A live run's leak alert written between the app's opening and its first read of the runs (seconds on a
    busy machine) was counted as old: no toast, no bell. Alerts now carry their events' times through
    summary.json and the index's rows; what was raised before the opening stays in the views."""
    from gpumon.core.runs.reading.summary import from_row, to_row

    run_dir = tmp_path / "live"
    run_dir.mkdir()
    events = EventWriter(run_dir, "launcher")
    events.write("alert", text="growing: rank 0 +2 MiB a step", kind="leak")
    supervisor = RunTelemetry(run_dir)
    supervisor.update()
    save_summary(supervisor)
    record = RunRecord("live", run_dir, RunSpec("script", program="train.py"), {"state": "running"})
    app: App[None] = App()
    async with app.run_test() as pilot:
        while time.time() <= supervisor.alert_times[-1]:  # the clock moves past the first alert's time
            time.sleep(0.001)
        notices = Notices(app)
        events.write("alert", text="leak: rank 0 [grows] 3 MiB a step", kind="leak")
        reader = RunTelemetry(run_dir)  # the app's fold: summary.json, then the events after it
        reader.update()
        summary = summarise(record, reader)
        assert summary.alert_count == 2 and len(summary.alert_times) == 2
        indexed = from_row(run_dir, to_row(summary))  # as the runs index keeps it
        assert indexed is not None and indexed.alert_times == summary.alert_times
        notices.run_alerts([indexed])  # the first read
        notices.run_alerts([indexed])
        await pilot.pause()
        assert [str(n.message) for n in app._notifications] == ["live: leak: rank 0 [grows] 3 MiB a step"]
