"""The Alerts view (!, alt+a): the alerts of every run in one table, newest on top, with where each went.

The feeds' reader thread (tui/reader.py, shared with the Runs view) reads the runs' attempts files every 2 s, shown
or not (the top bar counts the unread), through ``core/alerts/history.AlertBook``, which re-reads only files that
changed, and posts them only when they changed. Enter opens the alert's run in the
Runs view. Alert texts are not ours: cells and the detail are Rich ``Text``, never markup.
"""

from __future__ import annotations

import time

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.events import Resize
from textual.widgets import DataTable, Static

from gpumon.core.alerts.history import AlertBook, AlertEntry, mark_read, read_at
from gpumon.core.format import elide
from gpumon.core.visible import visible
from gpumon.tui.feeds import AlertsRefreshed, OpenRun, ReadFailed
from gpumon.tui.reader import Reader
from gpumon.tui.view import AppContext, View
from gpumon.tui.widgets.keyed_table import PADDING, RowTable
from gpumon.tui.widgets.render import short_run_id

REFRESH_S = 2.0
TIME_FORMAT = "%m-%d %H:%M:%S"
COLUMNS = (("TIME", "time"), ("RUN", "run"), ("KIND", "kind"), ("STATUS", "status"), ("TEXT", "text"))
TEXT_MIN = 30  # below this, RUN shows the short id ("script-c3d4") to leave TEXT the room
STATUS_STYLE = {"sent": "green", "failed": "red", "trying": "yellow", "held": "dim"}


def status_label(status: str) -> str:
    """The STATUS cell: "not sent (no channel picks it)" would take 30 columns from TEXT; the detail says why."""
    return "no channel" if status.startswith("not sent") else status


def _words(text: str) -> str:
    """An alert's text on one line, its control characters shown as ``less`` shows them (it quotes a run)."""
    return visible(" ".join(text.split()))


def alert_widths(entries: list[AlertEntry], width: int) -> tuple[list[int], bool]:
    """Each column as wide as its longest value (its header at least), TEXT the rest of ``width`` (cell padding
    and a scrollbar kept out); and whether RUN shows short ids, which it does where TEXT would be narrow."""
    for short in (False, True):
        runs = [visible(short_run_id(e.run) if short and e.run else e.run or "-") for e in entries]
        fixed = [
            len(time.strftime(TIME_FORMAT, time.gmtime(0))),
            max([len("RUN"), *map(len, runs)]),
            max([len("KIND"), *(len(visible(e.kind)) for e in entries)]),
            max([len("STATUS"), *(len(status_label(e.summary())) for e in entries)]),
        ]
        longest = max([len("TEXT"), *(len(_words(e.text)) for e in entries)])
        text = min(longest, width - 1 - sum(fixed) - PADDING * len(COLUMNS))
        if text >= TEXT_MIN or short:
            return [*fixed, max(len("TEXT"), text)], short
    raise AssertionError("unreachable")


class AlertsView(View, Vertical):
    NAME = "alerts"
    TITLE = "Alerts"
    KEYS = "exclamation_mark,alt+a"
    HELP_NOTE = "every run's alerts, newest on top, and what each channel did with them ([alerts] in config.toml)"
    BINDINGS = [
        Binding("enter", "open_run", "open run", id="alert_open", tooltip="open the alert's run in the Runs view"),
    ]

    def __init__(self, context: AppContext) -> None:
        super().__init__(id="alerts")
        self.context = context
        self.entries: list[AlertEntry] = []
        self.read_at = 0.0
        self._book: AlertBook | None = None
        # reads every 2 s on the feeds' thread; marks what it reads as read while the view shows
        self._reader: Reader[bool, AlertsRefreshed] = Reader(
            REFRESH_S, self._read, self._fingerprint, self.post_message, self._failed, False
        )
        self._drawn: tuple[tuple[str, str, bool], ...] | None = None
        self._width = 0

    def compose(self) -> ComposeResult:
        table: DataTable[Text] = RowTable(cursor_type="row", zebra_stripes=True, id="alert-table")
        for label, key in COLUMNS:
            table.add_column(label, key=key)
        yield table
        yield Static(Text("no alerts yet", style="dim"), id="alert-detail")

    def on_mount(self) -> None:
        self._reader.start()

    def on_unmount(self) -> None:
        self._reader.stop()

    def shown(self) -> None:
        self._reader.ask(True)  # the user looks: this read marks everything read

    def hidden(self) -> None:
        self._reader.ask(False)

    def poll(self) -> None:
        """Read now, and hand the alerts on even if unchanged."""
        self._reader.again()

    def _read(self, mark: bool) -> AlertsRefreshed:
        if self._book is None:
            self._book = AlertBook(self.context.store.root if self.context.store is not None else None)
        entries = self._book.read()
        seen = read_at(self._book.root)
        if mark and entries and entries[0].t > seen:
            seen = entries[0].t
            mark_read(self._book.root, seen)
        return AlertsRefreshed(entries, seen)

    @staticmethod
    def _fingerprint(mark: bool, got: AlertsRefreshed) -> object:
        """What the table, the badge and the notices show: each alert's id, where it went, and the read mark."""
        return tuple((e.id, e.summary()) for e in got.entries), got.read_at

    def _failed(self, error: BaseException) -> None:
        self.post_message(ReadFailed(f"Could not read alerts: {error}"))

    def on_read_failed(self, message: ReadFailed) -> None:
        self.notify(message.text, severity="error", timeout=8, markup=False)

    def on_alerts_refreshed(self, message: AlertsRefreshed) -> None:
        self.entries, self.read_at = message.entries, message.read_at
        drawn = tuple((e.id, e.summary(), e.t > message.read_at) for e in message.entries)
        if drawn != self._drawn:  # unchanged alerts: no redraw
            self._drawn = drawn
            self._draw()

    def _draw(self) -> None:
        table = self.query_one("#alert-table", DataTable)
        keep = table.cursor_row
        self._width = self.size.width or self.app.size.width
        widths, short = alert_widths(self.entries, self._width)
        table.clear(columns=True)
        for (label, key), width in zip(COLUMNS, widths, strict=True):
            table.add_column(label, key=key, width=width)
        for e in self.entries:
            unread = e.t > self.read_at
            status = e.summary()
            run = e.run or "-"
            table.add_row(
                Text(time.strftime(TIME_FORMAT, time.localtime(e.t)), style="bold" if unread else ""),
                Text(visible(short_run_id(run) if short and e.run else run)),
                Text(visible(e.kind), style="bold" if unread else ""),
                Text(status_label(status), style=STATUS_STYLE.get(status, "")),
                Text(elide(_words(e.text), widths[-1])),
                key=e.id,
            )
        if self.entries:
            table.move_cursor(row=min(keep, len(self.entries) - 1))
        self._detail(self._selected())

    def on_resize(self, event: Resize) -> None:
        if event.size.width != self._width and self._drawn is not None:
            self._draw()  # TEXT takes the room the other columns leave

    def _selected(self) -> AlertEntry | None:
        table = self.query_one("#alert-table", DataTable)
        if not self.entries or table.cursor_row < 0:
            return None
        return self.entries[min(table.cursor_row, len(self.entries) - 1)]

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._detail(self._selected())

    def _detail(self, entry: AlertEntry | None) -> None:
        if entry is None:
            text = Text("no alerts yet: runs raise them (failed, leak, nan, stalled, ...)", style="dim")
        else:
            head = visible(f"{entry.run or entry.host} · {entry.kind} · {entry.state or ''}")
            text = Text(head + "\n", style="bold")
            text.append(visible(entry.text) + "\n")  # the run's words (an exception): shown, never obeyed
            for channel, outcome in entry.delivery().items():
                text.append(f"{channel}: ", style="dim")
                text.append(visible(outcome) + "\n", style="red" if outcome.startswith("failed") else "")
            for why in (entry.held, entry.config_error):
                if why:
                    text.append(visible(why) + "\n", style="yellow")
            if not entry.channels and not entry.config_error:
                text.append("sent nowhere: no channel in [alerts] picks this kind", style="dim")
        self.query_one("#alert-detail", Static).update(text)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_open_run()  # the table takes enter itself: its selection is the binding's action

    def action_open_run(self) -> None:
        entry = self._selected()
        if entry is None or entry.run is None:
            self.notify("This alert belongs to no run.", severity="warning", markup=False)
            return
        self.post_message(OpenRun(entry.run))
