"""What gpumon does at rest (issue 35): nothing it need not do.

The runs and alerts feeds started a Textual thread worker per poll (a worker, its state messages, a hand-off
to a pool thread, the read's message: 1.5 a second), the Trials and Doctor views ticked while hidden, for
nothing, and the input thread woke 10 times a second. Now both feeds read on one reader thread, each on its interval,
and post only what changed; a hidden view's tick is paused; the input thread sleeps until a key.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.worker import Worker

from gpumon.tui.app import GpumonApp
from gpumon.tui.views.alerts.view import AlertsView
from gpumon.tui.views.doctor.view import DoctorView
from gpumon.tui.views.runs.view import RunsView
from gpumon.tui.views.trials.view import TrialsView
from tests.conftest import make_app, pilot_until
from tests.test_runs_view import FINISHED, T0, record_run

READS = 3  # the window at rest: this many reads of the runs (one a second)


class Counted:
    """Calls of some methods, and threads started, while the app runs."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *where: tuple[type[Any], str]) -> None:
        self.calls: dict[str, int] = {}
        self.threads: list[str] = []
        for cls, name in where:
            self._count(monkeypatch, cls, name)
        start = threading.Thread.start

        def counted_start(thread: threading.Thread) -> None:
            self.threads.append(thread.name)
            start(thread)

        monkeypatch.setattr(threading.Thread, "start", counted_start)
        self._count(monkeypatch, Worker, "__init__")  # a Textual worker (thread ones run in a reused pool)

    def _count(self, monkeypatch: pytest.MonkeyPatch, cls: type[Any], name: str) -> None:
        method = getattr(cls, name)
        key = f"{cls.__name__}.{name}"
        self.calls[key] = 0

        def counted(this: Any, *args: Any, **kwargs: Any) -> Any:
            self.calls[key] += 1
            return method(this, *args, **kwargs)

        monkeypatch.setattr(cls, name, counted)

    def now(self) -> tuple[dict[str, int], int]:
        return dict(self.calls), len(self.threads)


def readers(app: GpumonApp) -> tuple[Any, Any]:
    return app.query_one(RunsView)._reader, app.query_one(AlertsView)._reader


async def settled(pilot: Pilot[None]) -> None:
    """The first reads have shown: the runs listed, the alerts counted, what the app builds ahead built."""
    app = pilot.app
    assert isinstance(app, GpumonApp)
    runs, alerts = readers(app)
    read = lambda: FINISHED in app.context.runs and app._top_alerts.unread >= 0  # noqa: E731
    await pilot_until(pilot, read, "the first reads never came")
    await pilot_until(pilot, lambda: runs.reads >= READS and alerts.reads >= 2, "the readers never read again")
    # built ahead: the help, the form, the footers' keys laid out, and the reads ahead (the doctor's run, the
    # trials) done; on a loaded machine they came after the reads above (a thread of theirs counted "at rest")
    done = lambda: not app.drawing_unseen() and all(w.is_finished for w in app.workers)  # noqa: E731
    await pilot_until(pilot, done, "what the app builds ahead was never built")


async def at_rest(pilot: Pilot[None], reads: int = READS) -> None:
    """Until the runs reader has read ``reads`` more times (about ``reads`` seconds), the alerts reader twice."""
    assert isinstance(pilot.app, GpumonApp)
    runs, alerts = readers(pilot.app)
    want_runs, want_alerts = runs.reads + reads, alerts.reads + 2
    await pilot_until(pilot, lambda: runs.reads >= want_runs and alerts.reads >= want_alerts, "no reads at rest")


async def test_at_rest_no_thread_is_started_and_no_read_posted(views_home: Path, monkeypatch) -> None:
    count = Counted(
        monkeypatch,
        (GpumonApp, "on_runs_refreshed"),
        (GpumonApp, "on_alerts_refreshed"),
        (TrialsView, "_tick"),
        (DoctorView, "_tick"),
    )
    app = make_app(gpus=2)
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        before, threads = count.now()
        await at_rest(pilot)
        after, threads_after = count.now()
        assert count.threads[threads:threads_after] == []
        assert after == before  # no worker; nothing read changed: nothing posted; the hidden views never ticked


async def test_a_new_run_reaches_the_app_at_the_next_read(views_home: Path) -> None:
    app = make_app(gpus=2)
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        runs, _ = readers(app)
        new = "script-1121-110000-f00d"
        posted_at: list[int] = []  # the reader's read count when it handed the new run on
        post = runs._post

        def counted(read: Any) -> None:
            if not posted_at and any(s.id == new for s in read[0].summaries):
                posted_at.append(runs.reads)
            post(read)

        runs._post = counted
        read = runs.reads
        record_run(
            views_home,
            new,
            app.context.runs[FINISHED].record.spec,
            {"state": "finished", "created": T0 + 5000, "started": T0 + 5000, "ended": T0 + 5060, "exit_code": 0},
            ranks=1,
            steps=3,
        )
        await pilot_until(pilot, lambda: new in app.context.runs, "the new run never reached the app")
        # the read under way as the dir was made (it may have listed the folder before), else the next one
        assert posted_at[0] <= read + 2
        assert new in app.query_one(RunsView).summaries


async def test_a_new_alert_reaches_the_top_bar_at_the_next_read(views_home: Path) -> None:
    from tests.views_data import _alerts

    app = make_app(gpus=2)
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        unread = app._top_alerts.unread
        _, alerts = readers(app)
        posted_at: list[int] = []  # the reader's read count when it handed the new alert on
        post = alerts._post

        def counted(got: Any) -> None:
            if not posted_at and any(e.id == "a9" for e in got.entries):
                posted_at.append(alerts.reads)
            post(got)

        alerts._post = counted
        read = alerts.reads
        doc = {"type": "alert", "id": "a9", "kind": "failed", "text": "failed", "t": T0 + 5000, "run": FINISHED}
        _alerts(views_home, FINISHED, [{**doc, "state": "failed", "host": "trainbox", "channels": []}])
        await pilot_until(pilot, lambda: app._top_alerts.unread == unread + 1, "the new alert was never counted")
        assert posted_at[0] <= read + 2


@pytest.mark.parametrize(("key", "view"), [("t", TrialsView), ("d", DoctorView)])
async def test_a_views_tick_runs_only_while_it_shows(views_home: Path, monkeypatch, key: str, view: type) -> None:
    count = Counted(monkeypatch, (view, "_tick"), (view, "poll"))
    tick, poll = f"{view.__name__}._tick", f"{view.__name__}.poll"
    app = make_app(gpus=2)
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        await at_rest(pilot, 2)
        assert count.calls[tick] == 0  # hidden since the start: paused
        polls = count.calls[poll]
        await pilot.press(key)
        await pilot_until(pilot, lambda: count.calls[poll] > polls, "showing the view read nothing")  # at once
        await pilot_until(pilot, lambda: count.calls[tick] >= 1, "the shown view never ticked")
        await pilot.press("g")
        await pilot.pause()
        ticks = count.calls[tick]
        await at_rest(pilot, 3)  # its interval is 2 s at most
        assert count.calls[tick] == ticks


def test_the_input_loop_sleeps_until_a_key_or_its_stop(monkeypatch) -> None:
    """Textual's input loop woke 10 times a second with no input (select(0.1), to look at its stop flag)."""
    import os
    import pty
    import selectors
    import time
    import tty

    from textual._xterm_parser import XTermParser

    from gpumon.tui.textual_private.escape import WakingEvent, read_keys

    selects: list[float | None] = []
    select = selectors.SelectSelector.select

    def counted(self: selectors.SelectSelector, timeout: float | None = None) -> Any:
        selects.append(timeout)
        return select(self, timeout)

    monkeypatch.setattr(selectors.SelectSelector, "select", counted)
    master, slave = pty.openpty()
    tty.setraw(slave)
    wake_read, wake_write = os.pipe()
    stop, keys = WakingEvent(wake_write), []
    thread = threading.Thread(target=read_keys, args=(slave, stop, keys.append, XTermParser(), wake_read))
    thread.start()
    try:
        os.write(master, b"a")
        deadline = time.monotonic() + 30
        while not keys and time.monotonic() < deadline:
            time.sleep(0.01)
        assert keys, "the key never came"
        woke = len(selects)
        time.sleep(1.0)  # at rest: Textual's loop returned ~10 times here
        assert len(selects) == woke
    finally:
        stop.set()
        thread.join(timeout=10)
        for fd in (master, slave, wake_read, wake_write):
            os.close(fd)
    assert not thread.is_alive(), "the stop did not wake the loop"


async def test_both_feeds_read_on_one_thread_and_an_asked_read_comes_at_once(views_home: Path, monkeypatch) -> None:
    """One thread wakes for both feeds (a thread each woke 1.5 times a second at rest); a read asked for (a view
    shown, a run launched) is done at once, not at the feed's next beat."""
    read_on: dict[str, set[str]] = {"runs": set(), "alerts": set()}
    app = make_app(gpus=2)
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        runs, alerts = readers(app)
        for name, reader in (("runs", runs), ("alerts", alerts)):
            read = reader._read

            def noted(ask: Any, read: Any = read, name: str = name) -> Any:
                read_on[name].add(threading.current_thread().name)
                return read(ask)

            monkeypatch.setattr(reader, "_read", noted)
        await at_rest(pilot)
        assert read_on["runs"] == read_on["alerts"] == {"gpumon feeds reader"}
        names = [t.name for t in threading.enumerate()]
        assert names.count("gpumon feeds reader") == 1, names
        alerts.interval = 3600.0  # its next beat an hour away: only an asked read can come now
        beat_passed = runs.reads + 3  # the beat it had already set (2 s away at most) has passed
        await pilot_until(pilot, lambda: runs.reads >= beat_passed, "the runs feed stopped reading")
        asked = alerts.reads
        alerts.again()
        await pilot_until(pilot, lambda: alerts.reads > asked, "an asked read waited for the feed's beat")


async def test_a_read_asked_off_the_beat_falls_back_onto_it(views_home: Path) -> None:
    """The runs read each second, the alerts every 2 s, on one thread: an asked read (a view shown) put the alerts
    off the runs' beat for good, and the thread woke 1.5 times a second. Now the next read after it is on the
    beat again: the thread wakes once a second, for both."""
    from gpumon.tui.reader import _BEAT

    app = make_app(gpus=2)
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        runs, alerts = readers(app)
        await at_rest(pilot)
        beat = runs.reads
        await pilot_until(pilot, lambda: runs.reads > beat, "the runs feed stopped reading")
        await pilot.pause(0.5)  # half way between two of the runs' reads (the pause places the ask; waits on nothing)
        asked = alerts.reads
        alerts.again()  # off the beat
        await pilot_until(pilot, lambda: alerts.reads > asked, "the asked read did not come")
        wakes, read, alerts_read = _BEAT.wakes, runs.reads, alerts.reads
        await pilot_until(pilot, lambda: runs.reads >= read + 6, "the runs feed stopped reading")
        assert alerts.reads >= alerts_read + 2  # the alerts kept reading (every 2 s)
        assert _BEAT.wakes - wakes <= runs.reads - read + 1  # one wake-up per second: none for the alerts alone


async def test_at_rest_the_feeds_read_just_after_a_frame_and_go_on_without_frames(views_home: Path) -> None:
    """Woken on its own between frames the feeds' thread cost 0.4-0.5 ms a second on a quiet machine, just after
    a frame 0.2-0.3: at rest it reads when a sample's frame was drawn. A sampler that stops (a hung NVML) sends no
    frame: the feeds read on without."""
    from gpumon.tui.reader import _BEAT

    app = make_app(gpus=2)
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        runs, _alerts = readers(app)
        app.sampler.start()  # a sample each second, as `gpumon` runs it
        try:
            await at_rest(pilot)
            await pilot_until(pilot, lambda: _BEAT.frame_wakes > 0, "no read came on a frame")
            wakes, on_frames, read = _BEAT.wakes, _BEAT.frame_wakes, runs.reads
            await pilot_until(pilot, lambda: runs.reads >= read + 6, "the runs feed stopped reading")
        finally:
            app.sampler.stop()  # no sample, no frame
        assert _BEAT.wakes - wakes <= runs.reads - read + 1  # one wake-up per read, for both feeds
        assert _BEAT.frame_wakes - on_frames >= (_BEAT.wakes - wakes) // 2  # most on a frame (busy: late)
        stopped = runs.reads
        await pilot_until(pilot, lambda: runs.reads >= stopped + 3, "the feeds waited for a frame that never came")
