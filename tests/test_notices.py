"""The app's notices (gpumon/tui/notices.py): an alert of no run (a fleet host down) is a toast whatever
shows, once; what was there when the app opened, and a run's alert (told with its run), are not."""

from __future__ import annotations

import time

from textual.app import App

from gpumon.core.alerts.history import AlertEntry
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
