"""The app's feeds, as messages: a GPU/host sample from the sampler thread, run summaries from the runs worker."""

from __future__ import annotations

from textual.message import Message

from gpumon.core.model import Snapshot
from gpumon.core.runs.monitor import RunSummary
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
