"""The full-screen log (`o` in the Runs view) of a run past its log's cap: its head, the cut line, then the run's
latest output from <log>.live as it comes; once the run ended, the log as kept (the tail shown once)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gpumon.core.logs import live
from gpumon.core.logs.past_cap import PastCapWindow
from gpumon.tui.views.runs.log_pane import LogPane
from tests.conftest import make_app, pilot_until
from tests.test_alerts_channels import Cli
from tests.test_log_cap_live import CHATTY
from tests.test_runs_logs import open_log, search, status_line
from tests.test_runs_view import screen_text


async def test_the_full_screen_log_past_its_cap_shows_the_latest_lines_then_the_kept_tail_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli = Cli(tmp_path, '[runs]\nlog_cap = "64 KiB"\n')
    run_id = cli.launch(CHATTY)
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GPUMON_CONFIG_DIR", str(cli.cfg))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    app = make_app(gpus=1)
    async with app.run_test(size=(120, 30)) as pilot:
        screen = await open_log(pilot, 1, run_id)
        pane = screen.query_one(LogPane)
        await pilot_until(pilot, lambda: "after the cap: step 1" in screen_text(app), "no line past the cap", 120)
        lines = pane.page.lines
        assert lines[0] == "first line of the run"  # the head as kept, then the cut line, then the latest output
        cut = next(i for i, line in enumerate(lines) if "this log reached its cap" in line)
        assert cut < lines.index("filler 03999 " + "x" * 40) < lines.index("after the cap: step 1")
        await search(pilot, "step")  # the lines past the cap are found too (they are not in the file)
        await pilot_until(pilot, lambda: "match 1 of 1 line" in status_line(app), "the live line was not found")
        await pilot.press("f")  # the search's jump stopped the follow: on again
        (tmp_path / "go1").touch()
        await pilot_until(pilot, lambda: "after the cap: step 2" in screen_text(app), "the new line never showed", 120)
        (tmp_path / "go2").touch()
        await pilot_until(pilot, lambda: "after the cap: step 3" in screen_text(app), "the new line never showed", 120)
        (tmp_path / "go3").touch()
        kept = lambda: any("of output cut here" in line for line in pane.page.lines)  # noqa: E731
        await pilot_until(pilot, kept, "the kept tail never came", 120)
        lines = pane.page.lines
        log = (cli.run_dir(run_id) / "logs" / "rank0.log").read_text().splitlines()
        assert list(lines) == log  # the log as kept: head, cut lines, tail; nothing from <log>.live again
        assert lines.count("after the cap: step 1") == 1 and lines[-1] == "after the cap: step 3"
        assert "after the cap: step 3" in screen_text(app)


SLOW_FLOOD = """\
import os, sys, time
for i in range(2000):
    print(f"filler {i:05d} " + "x" * 40)
print("before the flood", flush=True)
end = time.monotonic() + 600  # a test that failed before its go files never leaves this run behind for good
while not os.path.exists("go1") and time.monotonic() < end:
    time.sleep(0.05)
for i in range(30000):
    print(f"flood {i:05d} " + "y" * 60)
print("after the flood", flush=True)
while not os.path.exists("go2") and time.monotonic() < end:
    time.sleep(0.05)
"""


def test_more_output_between_two_reads_than_the_live_file_holds_is_said_in_one_line(tmp_path: Path) -> None:
    cli = Cli(tmp_path, '[runs]\nlog_cap = "64 KiB"\n')
    run_id = cli.launch(SLOW_FLOOD)
    log = cli.run_dir(run_id) / "logs" / "rank0.log"
    window = PastCapWindow(log, keep=100_000)  # every line after the gap held, to count its bytes
    deadline = time.monotonic() + 120
    while "before the flood" not in window.follow().lines[-1:]:
        assert time.monotonic() < deadline, "the run's line past the cap never came"
        time.sleep(0.2)
    since = window.since
    (tmp_path / "go1").touch()
    while (got := live.read(log, None, 64)) is None or not got[1].endswith(b"after the flood\n"):
        assert time.monotonic() < deadline, "the flood never came"
        time.sleep(0.2)
    read = window.bytes_read
    page = window.follow()  # 2.2 MB came since the last read: more than <log>.live holds (1 MiB at most)
    try:
        new = page.lines[page.lines.index("before the flood") + 1 :]
        assert new[0].startswith("[gpumon: ") and new[0].endswith(" bytes of output went by unread]"), new[:2]
        unread = int(new[0].split()[1])
        after = new[1:]
        assert after[-1] == "after the flood" and after[-2] == "flood 29999 " + "y" * 60
        assert not any("went by unread" in line for line in after)
        shown = sum(len(line) + 1 for line in after)  # ASCII lines: a character a byte
        assert since + unread + shown == got[0].end  # every byte past the gap is shown, once
        assert window.bytes_read - read == shown  # and read once: never the whole live file again
        assert unread > 2_190_000 - live.LIVE_BYTES  # what went by, said in bytes
        small = PastCapWindow(log, keep=10, chunk=1024)  # a head of many chunks: paged up, then End (follow)
        assert small.tail().lines[-1] == "after the flood"
        while not (up := small.older()).at_start:
            pass
        assert up.lines[0] == "filler 00000 " + "x" * 40 and up.end < up.size and "after the flood" not in up.lines
        assert small.follow().lines[-1] == "after the flood"
    finally:
        (tmp_path / "go2").touch()
