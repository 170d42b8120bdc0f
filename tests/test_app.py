"""Pilot tests: what a user sees and what each key does."""

from __future__ import annotations

import contextlib
import html
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from textual.widgets import Static

from gpumon.core.config import BINDING_IDS
from gpumon.core.gpu import open_gpu_source
from gpumon.core.host import HostSource
from gpumon.core.model import GpuDevice, GpuProcess, GpuSample
from gpumon.core.sampler import Sampler
from gpumon.tui.app import GpumonApp
from gpumon.tui.textual_private.footer import FooterKey
from gpumon.tui.view import READONLY_OFF
from gpumon.tui.views.gpus.view import GpusView
from gpumon.tui.views.runs.launch_form import LaunchForm
from gpumon.tui.views.trials.trial_table import TrialTable
from gpumon.tui.widgets.gpu_panels import GpuPanel, HostPanel
from gpumon.tui.widgets.process_table import ProcessTable
from gpumon.tui.widgets.screens import ConfirmScreen, HelpScreen
from tests.conftest import make_app, no_gpu_app, notes, pilot_until
from tests.trials_data import record_live


def row_keys(table: ProcessTable) -> list[str]:
    return [str(row.key.value) for row in table.ordered_rows]


def screen_text(app: GpumonApp) -> str:
    """The characters on screen, as the SVG screenshot holds them."""
    svg = app.export_screenshot()
    return html.unescape("".join(re.findall(r">([^<]*)</text>", svg))).replace("\xa0", " ")


async def test_number_keys_and_arrows_select_gpus() -> None:
    app = make_app(gpus=4)
    async with app.run_test(size=(100, 40)) as pilot:
        assert app.query_one(GpusView).selected == 0
        await pilot.press("2")
        # the key goes on from the focused list as a message: beside CPU hogs it was handled after press returned
        await pilot_until(pilot, lambda: app.query_one(GpusView).selected == 2, "selection never moved", 30)
        assert app.query_one(GpusView).selected == 2
        assert app.screen.query_one("#gpu-2", GpuPanel).has_class("-selected")
        assert not app.screen.query_one("#gpu-0", GpuPanel).has_class("-selected")
        assert "GPU 2" in str(app.query_one(ProcessTable).border_title)
        await pilot.press("right")
        await pilot_until(pilot, lambda: app.query_one(GpusView).selected == 3, "selection never moved", 30)
        assert app.query_one(GpusView).selected == 3
        await pilot.press("right")  # wraps around
        await pilot_until(pilot, lambda: app.query_one(GpusView).selected == 0, "selection never moved", 30)
        assert app.query_one(GpusView).selected == 0
        await pilot.press("left")
        await pilot_until(pilot, lambda: app.query_one(GpusView).selected == 3, "selection never moved", 30)
        assert app.query_one(GpusView).selected == 3
        await pilot.press("7")  # no such GPU: said, selection unchanged
        await pilot_until(pilot, lambda: any("No GPU 7" in n for n in notes(app)), "no note for GPU 7", 30)
        assert app.query_one(GpusView).selected == 3


async def test_up_down_move_between_gpus_when_the_list_has_focus() -> None:
    app = make_app(gpus=3)
    async with app.run_test(size=(100, 40)) as pilot:
        app.query_one("#gpus").focus()
        view = app.query_one(GpusView)
        # keys are handed on one at a time (typeahead.py): beside CPU hogs the second `down` came after press()
        await pilot.press("down", "down")
        await pilot_until(pilot, lambda: view.selected == 2 and not app.keys_waiting, f"selected {view.selected}")
        await pilot.press("up")
        await pilot_until(pilot, lambda: view.selected == 1 and not app.keys_waiting, f"selected {view.selected}")


async def test_clicking_a_gpu_panel_selects_it() -> None:
    app = make_app(gpus=2)
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.click("#gpu-1")
        assert app.query_one(GpusView).selected == 1


async def test_process_table_shows_the_selected_gpu_and_all_on_a() -> None:
    app = make_app(gpus=2)
    async with app.run_test(size=(100, 40)) as pilot:
        table = app.query_one(ProcessTable)
        snap = app.context.snapshot
        assert snap is not None
        assert set(row_keys(table)) == {f"0:{p.pid}" for p in snap.gpu.devices[0].processes}
        await pilot.press("a")
        total = sum(len(d.processes) for d in snap.gpu.devices)
        assert table.row_count == total == 3
        await pilot.press("a")
        assert table.row_count == len(snap.gpu.devices[0].processes)


async def test_sorting_orders_rows_by_the_chosen_column() -> None:
    app = make_app(gpus=2)
    async with app.run_test(size=(100, 40)) as pilot:
        table = app.query_one(ProcessTable)
        await pilot.press("a")
        procs = {f"{p.gpu_index}:{p.pid}": p for d in app.context.snapshot.gpu.devices for p in d.processes}  # type: ignore[union-attr]
        by_mem = sorted(procs, key=lambda k: procs[k].used_memory or 0, reverse=True)
        assert row_keys(table) == by_mem  # default: memory, biggest first
        await pilot.press("s", "s")  # mem -> sm -> pid
        assert table.sort_key == "pid"
        assert row_keys(table) == sorted(procs, key=lambda k: procs[k].pid, reverse=True)
        await pilot.press("R")
        assert row_keys(table) == sorted(procs, key=lambda k: procs[k].pid)


async def test_a_signal_to_a_simulated_process_is_refused_at_once_without_a_question() -> None:
    app = make_app(gpus=1)
    async with app.run_test(size=(100, 40)) as pilot:
        app.query_one(ProcessTable).focus()
        for key in ("T", "K", "I"):
            await pilot.press(key)
            assert not isinstance(app.screen, ConfirmScreen)  # no question whose answer changes nothing
        said = [n for n in notes(app) if "is simulated: nothing to send" in n]
        assert [n.split()[-2] for n in said] == ["SIGTERM", "SIGKILL", "SIGINT"]


async def test_readonly_never_asks_to_send_signals() -> None:
    app = make_app(gpus=1, readonly=True)
    async with app.run_test(size=(100, 40)) as pilot:
        app.query_one(ProcessTable).focus()
        await pilot.press("T")
        assert not isinstance(app.screen, ConfirmScreen)
        assert any("Read-only" in n for n in notes(app))


def footer_keys(app: GpumonApp) -> set[str]:
    """The keys the footer offers now, as drawn (the footer keeps the sets of other views hidden)."""
    return {key.key for key in app.screen.query(FooterKey) if key.display and key.parent.display}


@pytest.mark.parametrize("readonly", [False, True])
async def test_readonly_offers_no_key_it_refuses_and_each_still_says_why(
    readonly: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path))
    record_live(tmp_path)  # a search: the Trials view has a trial table to act on
    app = make_app(gpus=1, readonly=readonly)
    refused = {"g": {"T", "K"}, "r": {"n", "T", "K"}, "t": {"x", "X"}, "d": {"c"}}
    async with app.run_test(size=(200, 40)) as pilot:
        for view, keys in refused.items():
            await pilot.press(view)
            trials = view == "t"
            await pilot_until(
                pilot, lambda t=trials: "q" in footer_keys(app) and (not t or app.query_one(TrialTable).row_count)
            )
            await pilot.pause()
            offered = footer_keys(app)
            assert keys.isdisjoint(offered) if readonly else keys <= offered, (view, offered)
            assert "q" in offered and "question_mark" in offered  # the others stay
        if readonly:
            await pilot.press("r", "n")
            said = "Read-only mode (--readonly): no runs are started or stopped"
            await pilot_until(pilot, lambda: notes(app)[-1:] == [said])  # n waits for the view it was typed for
            assert not isinstance(app.screen, LaunchForm)
    assert set(BINDING_IDS) >= READONLY_OFF  # each id is a binding's (a renamed one would be offered again)


class OneRealProcessSource:
    """A GPU we do not have, running a process we do: the signal path is real."""

    name = "fixture"

    def __init__(self, pid: int) -> None:
        proc = psutil.Process(pid)
        self.proc = GpuProcess(
            gpu_index=0,
            pid=pid,
            used_memory=1024**3,
            sm_util=50.0,
            kind="compute",
            user=proc.username(),
            command="python -c sleep",
            create_time=proc.create_time(),
        )

    def sample(self) -> GpuSample:
        dev = GpuDevice(
            0, "Fixture GPU", "GPU-0", gpu_util=50.0, mem_used=1024**3, mem_total=8 * 1024**3, processes=(self.proc,)
        )
        return GpuSample(source=self.name, devices=(dev,), time=time.time())

    def close(self) -> None:
        pass


@pytest.mark.parametrize(("key", "code"), [("T", -15), ("K", -9), ("I", -2)])
async def test_confirmed_signal_reaches_a_real_process(key: str, code: int) -> None:
    # The child says when Python is up: a SIGINT during its start ends it with 1, not -2 ("Failed to import
    # the site module"), which a loaded machine made likely. Every wait below is on an event, with room.
    ready = "import sys, time; print('ready', flush=True); time.sleep(600)"
    child = subprocess.Popen([sys.executable, "-c", ready], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        app = make_app(OneRealProcessSource(child.pid), ticks=2)  # notes() keeps what it told: a toast expires
        async with app.run_test(size=(100, 40)) as pilot:
            app.query_one(ProcessTable).focus()
            await pilot.press(key)
            await pilot_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), timeout=60)
            await pilot.press("n")  # cancelled: still alive
            await pilot_until(pilot, lambda: not isinstance(app.screen, ConfirmScreen), timeout=60)
            assert child.poll() is None
            await pilot.press(key)
            await pilot_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), timeout=60)
            await pilot.press("y")
            # The answer's callback sends the signal on the app's loop, possibly after press() returned: wait
            # for the child's end without blocking that loop (child.wait here starved it, and timed out).
            await pilot_until(pilot, lambda: child.poll() is not None, timeout=120)
            assert child.returncode == code
            await pilot_until(pilot, lambda: any(f"PID {child.pid}" in n for n in notes(app)), timeout=60)
    finally:
        child.kill()
        child.wait()


async def test_80x24_shows_every_part_and_wide_terminals_put_gpus_side_by_side() -> None:
    app = make_app(gpus=4)
    async with app.run_test(size=(200, 50)) as pilot:
        assert app.screen.has_class("-wide")
        p0, p1 = (app.query_one(f"#gpu-{i}", GpuPanel).region for i in (0, 1))
        assert p1.x > p0.x and p1.y == p0.y
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert not app.screen.has_class("-wide")
        screen = app.screen.region
        for widget in (app.query_one("#top-bar"), app.query_one(HostPanel), app.query_one(ProcessTable)):
            assert screen.contains_region(widget.region), widget
        assert app.query_one(ProcessTable).region.height >= 4
        text = screen_text(app)
        assert "UTIL" in text and "processes" in text and "host trainbox" in text


async def test_no_gpu_screen_says_why_and_keys_do_not_crash() -> None:
    app = no_gpu_app()
    async with app.run_test(size=(80, 24)) as pilot:
        # each waits for what it reads (beside four CPU hogs this test failed once, reading at once)
        await pilot_until(pilot, lambda: app.query("#no-gpu"), "no notice")
        notice = str(app.query_one("#no-gpu", Static).render())
        assert "No GPU shown" in notice and "NVML library not found" in notice
        # the note shows for 3 s: notes() counts it as raised (beside four hogs it was gone when press returned)
        await pilot.press("1", "right", "T", "s", "a")
        assert app.query_one(HostPanel).host is not None
        with contextlib.suppress(AssertionError):  # said below
            await pilot_until(pilot, lambda: any("No GPU 1" in n for n in notes(app)), timeout=30)
        assert any("No GPU 1" in n for n in notes(app)), notes(app)


async def test_no_gpu_on_this_machine_with_the_real_sources() -> None:
    source = open_gpu_source()
    if source.name != "none":
        pytest.skip("a GPU is visible here")
    sampler = Sampler(source, HostSource(), interval=0.25)
    sampler.start()
    app = GpumonApp(sampler)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot_until(pilot, lambda: app.context.snapshot is not None and app.query("#no-gpu"), "no sample")
            assert "NVML" in str(app.query_one("#no-gpu", Static).render())
            first = app.query_one(HostPanel).host
            # a new host sample every 0.25 s (100 pauses of 0.05 s: a loaded CI machine may delay one longer)
            with contextlib.suppress(AssertionError):  # said by the assertion below
                await pilot_until(pilot, lambda: app.query_one(HostPanel).host is not first, timeout=30)
            assert app.query_one(HostPanel).host is not first  # host stays live
    finally:
        sampler.stop()


async def test_live_sampling_updates_panels_and_history() -> None:
    from gpumon.core.gpu.simulated import SimulatedSource

    sampler = Sampler(SimulatedSource(2, seed=3), HostSource(), interval=0.25)
    sampler.start()
    app = GpumonApp(sampler)
    try:
        async with app.run_test(size=(100, 40)) as pilot:
            with contextlib.suppress(AssertionError):  # said by the assertion below
                await pilot_until(
                    pilot,
                    lambda: app.query("#gpu-0") and len(app.query_one("#gpu-0", GpuPanel).util_history) >= 3,
                    timeout=30,
                )
            assert len(app.query_one("#gpu-0", GpuPanel).util_history) >= 3
    finally:
        sampler.stop()


async def test_a_sample_posted_as_the_app_quits_is_dropped_not_a_traceback() -> None:
    # The sampler's thread posts from its own clock: a sample queued as the user quits is handled after the
    # widgets are gone (NoMatches 'TopInfo' at every quit of a 4 Hz sampler on a loaded machine).
    from gpumon.tui.feeds import SampleReady

    app = make_app(gpus=1)
    async with app.run_test(size=(80, 24)):
        snapshot = app.context.snapshot
    assert snapshot is not None and not app.is_running
    app.on_sample_ready(SampleReady(snapshot))


async def test_help_opens_and_closes() -> None:
    app = make_app(gpus=1)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


async def test_lost_gpu_is_marked_and_the_other_stays_live() -> None:
    class HalfLost:
        name = "fixture"

        def sample(self) -> GpuSample:
            ok = GpuDevice(0, "GPU A", "a", gpu_util=10.0, mem_used=1, mem_total=2)
            lost = GpuDevice(1, "GPU B", "b", state="lost", reason="GPU is lost (NVML_ERROR_GPU_IS_LOST)")
            return GpuSample(source=self.name, devices=(ok, lost), time=time.time(), reason="GPU 1 not readable")

        def close(self) -> None:
            pass

    app = make_app(HalfLost(), ticks=2)
    async with app.run_test(size=(120, 40)):  # the top bar's reason beside the five view tabs
        assert app.query_one("#gpu-1", GpuPanel).has_class("-down")
        text = screen_text(app)
        assert "LOST" in text and "GPU 1 not readable" in text and "UTIL" in text


async def test_quit_with_q() -> None:
    app = make_app(gpus=1)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("q")
    assert app.return_code == 0
