"""The app's feeds, as messages: a GPU/host sample from the sampler thread, run summaries from the runs worker."""

from __future__ import annotations

from textual.message import Message

from gpumon.core.alerts.history import AlertEntry
from gpumon.core.model import Snapshot
from gpumon.core.runs.reading.summary import RunSummary
from gpumon.tui.widgets.log_view import LogTail


class SampleReady(Message):
    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        super().__init__()


class RunsRefreshed(Message):
    """One read of the state dir by the Runs view's worker; the app hands the pid map and warnings on."""

    def __init__(
        self,
        summaries: list[RunSummary],
        pids: dict[int, str],
        log: LogTail | None,
        gpus: int,
        asked: int | None,
        ranks: dict[int, int] | None = None,
        detail: RunSummary | None = None,
        disk: str | None = None,
    ) -> None:
        self.summaries = summaries
        self.pids = pids
        self.ranks = ranks or {}  # pid -> rank of the runs' ranks
        self.log = log  # the Runs view's LogTail for its selected run
        self.asked = asked  # the log the read was for: a newer choice makes this tail stale
        self.visible_gpus = gpus
        self.detail = detail  # the selected run with its series (an ended run's summary has none)
        self.disk = disk  # "state dir full: ..." while the state dir's filesystem is full
        super().__init__()


class AlertsRefreshed(Message):
    """One read of every run's alerts by the Alerts view's worker (newest first); the app counts the unread."""

    def __init__(self, entries: list[AlertEntry], read_at: float) -> None:
        self.entries = entries
        self.read_at = read_at  # when the user last looked: newer ones are unread
        super().__init__()

    @property
    def unread(self) -> int:
        return sum(1 for e in self.entries if e.t > self.read_at)


class ReadFailed(Message):
    """A feed's reader thread could not read (said once per distinct error)."""

    def __init__(self, text: str) -> None:
        self.text = text
        super().__init__()


class OpenRun(Message):
    """A view asks the app to show ``run_id`` in the Runs view (Enter on an alert)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__()
