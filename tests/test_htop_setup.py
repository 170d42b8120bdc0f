"""htop's F2 (Setup) and F3/F4's boxes in the GPUs view (issue 50, item 8): F2 shows the settings in effect and
where they come from, the refresh interval changes live; during a search the footer says what enter and escape do
there (not "/ filter"), and each box is labelled on screen."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gpumon.core.gpu.simulated import SimulatedSource
from gpumon.core.sampler import Sampler
from gpumon.tui.app import GpumonApp
from tests.conftest import FrozenHost, heard, make_app, pilot_until
from tests.test_cramped import screen_lines


def text(app: GpumonApp) -> str:
    return "\n".join(screen_lines(app))


async def test_f2_shows_the_settings_and_where_they_come_from(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GPUMON_CONFIG_DIR", str(tmp_path))
    (tmp_path / "config.toml").write_text("[runs]\nlog_cap = '64 MiB'\n")
    app = make_app(gpus=2, keymap={"terminate": "ctrl+t"})
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("f2")
        await pilot_until(pilot, lambda: "Setup (F2)" in text(app), "F2 opened nothing")
        shown = text(app)
        for line in ("refresh interval  1 s", "--interval", "GPU panels        full", "process tree      off"):
            assert line in shown, shown
        flat = "".join(line.strip("│ ") for line in screen_lines(app))  # a long path wraps at the box's edge
        assert str(tmp_path / "config.toml") in flat and "(not there" not in flat.split("config.toml")[1][:20]
        assert str(tmp_path / "keymap.toml") in flat and "1 key remapped" in shown
        await pilot.press("escape")
        await pilot_until(pilot, lambda: "Setup (F2)" not in text(app))


async def test_f2_changes_the_refresh_interval_live() -> None:
    sampler = Sampler(SimulatedSource(2, seed=1), FrozenHost(), interval=1.0)
    sampler.sample_once()
    app = heard(GpumonApp(sampler))
    sampler.start()  # sampling as the app does: the new interval paces the real thread
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.press("f2")
            await pilot_until(pilot, lambda: "refresh interval  1 s" in text(app), "F2 opened nothing")
            await pilot.press("right")  # 1 s -> 2 s
            await pilot_until(pilot, lambda: "refresh interval  2 s" in text(app), "the interval did not change")
            assert sampler.interval == 2.0
            await pilot.press("escape")
            await pilot_until(pilot, lambda: "every 2s" in screen_lines(app)[0], "the top bar kept the old interval")
            await pilot.press("f2", "left", "left")  # 2 s -> 1 s -> 0.5 s
            await pilot_until(pilot, lambda: sampler.interval == 0.5, "the interval did not go down")
            await pilot.press("escape")
            seen = sampler.latest
            started = time.monotonic()
            await pilot_until(pilot, lambda: sampler.latest is not seen, "no sample came")
            await pilot_until(pilot, lambda: "every 0.5s" in screen_lines(app)[0], "the top bar kept the old one")
            assert time.monotonic() - started < 30  # a bound on a failure only: the pace is the bench's
    finally:
        sampler.stop()


async def test_f2_toggles_compact_panels_as_c_does() -> None:
    app = make_app(gpus=4)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("f2", "down")  # GPU panels
        await pilot.press("right")
        await pilot_until(pilot, lambda: "compact (one line each)" in text(app), "the panels did not change")
        await pilot.press("escape")
        view = app.query_one("#body")
        assert view.has_class("-compact")


async def test_the_search_box_is_labelled_and_the_footer_says_what_enter_and_escape_do() -> None:
    app = make_app(gpus=2)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("f3")
        await pilot_until(pilot, lambda: "search (F3)" in text(app), "the search box has no label")
        footer = screen_lines(app)[-1]
        await pilot_until(pilot, lambda: "next match" in screen_lines(app)[-1], footer)
        footer = screen_lines(app)[-1]
        assert "end search" in footer and "filter" not in footer, footer
        await pilot.press("escape")
        await pilot.press("f4")
        await pilot_until(pilot, lambda: "filter (F4 /)" in text(app), "the filter box has no label")
        await pilot_until(pilot, lambda: "clear filter" in screen_lines(app)[-1], screen_lines(app)[-1])
        footer = screen_lines(app)[-1]
        assert "keep filter" in footer and "search" not in footer, footer
