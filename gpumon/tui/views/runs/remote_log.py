"""The selected remote run's log in the Runs view: one follow of it at a time (core/fleet/log_follow.py).

Selecting another host's run starts one ``gpumon logs RUN --follow`` on that host through ssh, kept for as
long as the run stays selected and the view shows; selecting anything else, hiding the view or quitting
stops it and its ssh. New lines are appended to the pane as they come (at most twice a second: a paint of
the pane costs ~9 ms of CPU here, the lines almost nothing). A failure shows its reason in the pane and is
tried again after 1 s, doubling to 30 s, while the run stays selected and live; a complete follow (the run
ended and its log was read out) is never tried again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from textual.message import Message
from textual.timer import Timer
from textual.widget import Widget

from gpumon.core.fleet.log_follow import RemoteLogFollow
from gpumon.tui.views.runs.reading import LOG_LINES

PAINT_EVERY_S = 0.5
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 30.0


class RemoteLogChanged(Message):
    """A follow has lines its pane has not shown, or it ended (the handler asks it which)."""

    def __init__(self, follow: RemoteLogFollow) -> None:
        self.follow = follow
        super().__init__()


class LogFollower:
    """Owns the one follow; ``lookup(key)`` gives the run now listed under a key (its host, id, liveness)."""

    def __init__(self, view: Widget, fleet: Any, lookup: Callable[[str], Any]) -> None:
        self.view = view
        self.fleet = fleet
        self.lookup = lookup
        self.follow: RemoteLogFollow | None = None
        self.key: str | None = None  # the run followed, or waiting to be tried again
        self.backoff = BACKOFF_FIRST_S
        self._retry: Timer | None = None
        self._paint: Timer | None = None  # the pane's next update, when the last was under PAINT_EVERY_S ago
        self._painted = 0.0

    def want(self, key: str | None) -> None:
        """Follow the log of the remote run keyed ``key`` (None or not a remote run: follow none)."""
        run = self.lookup(key) if key else None
        key = run.key if run is not None else None
        if key == self.key:
            return
        self.stop(wait=False)
        if run is not None:
            self.key, self.backoff = key, BACKOFF_FIRST_S
            self._start(run)

    def stop(self, wait: bool = True) -> None:
        """No follow left: its ssh gets SIGTERM now (``wait``: and is gone when this returns)."""
        for timer in (self._retry, self._paint):
            if timer is not None:
                timer.stop()
        self._retry = self._paint = None
        if self.follow is not None:
            self.follow.stop(wait=wait)
        self.follow, self.key = None, None

    def _start(self, run: Any) -> None:
        view = self.view

        def changed() -> None:  # the follow's reader thread: post and return
            view.post_message(RemoteLogChanged(follow))

        follow = RemoteLogFollow(self.fleet.ssh, run.host, self.fleet.gpumon, run.id, LOG_LINES, changed)
        self.follow = follow.start()

    def changed(self, follow: RemoteLogFollow, pane: Any) -> None:
        """Show what ``follow`` has for ``pane`` (RunDetail): new lines appended, then how it ended; at most
        every PAINT_EVERY_S (a repaint costs more than the lines: a chatty log's lines come in batches)."""
        if follow is not self.follow:
            return  # a stopped follow's last word
        wait = self._painted + PAINT_EVERY_S - time.monotonic()
        if wait > 0 and not follow.done:
            if self._paint is None:  # until then the follow sends no message: it was not taken from
                self._paint = self.view.set_timer(wait, lambda: self._show(follow, pane))
            return
        self._show(follow, pane)

    def _show(self, follow: RemoteLogFollow, pane: Any) -> None:
        self._paint = None
        if follow is not self.follow:
            return
        self._painted = time.monotonic()
        lines, replace = follow.take()
        pane.remote_log_lines(lines, replace)
        if not follow.done:
            pane.remote_log_note(None, following=True)
        elif follow.complete:
            pane.remote_log_note(None, following=False)
        else:
            self._failed(follow, pane)

    def _failed(self, follow: RemoteLogFollow, pane: Any) -> None:
        if follow.received:  # it had worked: the next failure waits from the start again
            self.backoff = BACKOFF_FIRST_S
        run = self.lookup(self.key or "")
        if run is None or not run.live:
            pane.remote_log_note(f"log not followed: {follow.reason}", following=False)
            return
        wait, self.backoff = self.backoff, min(self.backoff * 2, BACKOFF_MAX_S)
        pane.remote_log_note(f"log not followed: {follow.reason} · again in {wait:g} s", following=False)
        self.follow = None
        self._retry = self.view.set_timer(wait, self._again)

    def _again(self) -> None:
        self._retry = None
        run = self.lookup(self.key or "")
        if run is not None and run.live and self.view.display:
            self._start(run)
        else:  # the next want() of it starts afresh
            self.key = None
