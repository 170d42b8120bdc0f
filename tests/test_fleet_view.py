"""The Fleet view with hosts in every state: lines, totals, selection, a host's GPU view, remote signals."""

from __future__ import annotations

import dataclasses
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from gpumon.core.fleet.hosts import parse_host
from gpumon.core.fleet.model import FleetState, HostState
from gpumon.tui.views.fleet.host_block import HostBlock
from gpumon.tui.views.fleet.host_screen import HostScreen
from gpumon.tui.views.fleet.view import LOOK_S, FleetView, HostList
from gpumon.tui.widgets.process_table import ProcessTable
from gpumon.tui.widgets.screens import ConfirmScreen
from tests.conftest import make_app, pilot_until
from tests.fleet_data import StandInFleet, fleet_app, live_fleet, mixed_fleet, snapshots
from tests.test_app import notes, screen_text

STANDIN_SSH = [sys.executable, str(Path(__file__).with_name("local_ssh.py"))]


pytestmark = pytest.mark.usefixtures("utc")


def shown(block: HostBlock) -> bool:
    """The block shows in its list's window, as Textual's compositor placed it."""
    where = block.screen.find_widget(block)
    return where.region.overlaps(where.clip)


def blocks(app) -> dict[str, HostBlock]:
    return {b.host_name: b for b in app.query(HostBlock)}


async def open_first_host(pilot) -> None:
    await pilot.pause()
    await pilot.press("enter")
    # the key goes on from the focused block as a message: under load it is handled after press returns; the
    # screen is on top as soon as it is pushed, but shows its host (and its first sample) only once mounted
    await pilot_until(pilot, lambda: host_shown(pilot.app), "enter never showed the host", 30)


def host_shown(app: object) -> bool:
    screen = app.screen
    titles = screen.query("#host-title") if isinstance(screen, HostScreen) else []
    return any("esc: back" in str(title.render()) for title in titles)  # shown by its mount


def fleet_text(app) -> str:
    """The Fleet view's lines as drawn: the total, the hint, then each host block's strips."""
    view = app.query_one(FleetView)
    lines = [str(view.query_one("#fleet-total").render())]
    if view.query_one("#fleet-hint").display:
        lines.append(str(view.query_one("#fleet-hint").render()))
    for block in view.query(HostBlock):
        lines.extend(block.render_line(y).text.rstrip() for y in range(block.size.height))
    return "\n".join(lines)


async def test_the_fleet_is_the_first_view_and_says_each_hosts_state() -> None:
    app = fleet_app(StandInFleet([mixed_fleet()], interval=0))
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        assert app.view == "fleet"
        text = fleet_text(app)
        assert "1 of 8 GPUs idle · 5 hosts (2 live)" in text
        for words in (
            "gpu1  live 23 ms",
            "alice@gpu2:2222  live 41 ms",
            "gpu3  stale since 14:02:11",
            "gpu4  authentication refused",
            "gpu5  connecting",
            "waiting for the first snapshot",
        ):
            assert words in text, words  # fmt: skip
        assert "3 busy · 1 idle" in text and "2 busy · 0 idle" in text
        gpu1 = blocks(app)["gpu1"].host
        assert gpu1 is not None and [g.run for g in gpu1.gpus[:2]] == ["ddp-1122-140211-c132"] * 2
        assert "ddp-c132" in text and "researcher" in text and "idle" in text


async def test_keys_move_between_hosts_and_enter_opens_a_host_with_its_processes() -> None:
    app = fleet_app(StandInFleet([mixed_fleet()], interval=0))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        view = app.query_one(FleetView)
        assert view.selected == "gpu1" and blocks(app)["gpu1"].has_focus
        await pilot.press("j")
        await pilot_until(pilot, lambda: view.selected == "alice@gpu2:2222", "j never moved", 30)
        await pilot.press("enter")
        await pilot_until(pilot, lambda: isinstance(app.screen, HostScreen), "enter never opened the host", 30)
        screen = app.screen
        assert isinstance(screen, HostScreen) and screen.host_name == "alice@gpu2:2222"
        table = screen.query_one(ProcessTable)
        assert len(table.processes) == 3 and {p.pid for p in table.processes.values()} >= {5_000_000}
        assert "GPU 1 · Simulated H100 80GB HBM3" in screen_text(app)
        await pilot.press("escape")
        await pilot_until(pilot, lambda: not isinstance(app.screen, HostScreen), "escape never closed the host", 30)
        await pilot.press("j", "j", "enter")  # gpu4: down, nothing to open
        said = "gpu4: no snapshot yet (authentication refused)"
        await pilot_until(pilot, lambda: any(said in n for n in notes(app)), "enter on gpu4 said nothing", 30)
        assert not isinstance(app.screen, HostScreen)
        await pilot.press("k", "k", "k", "k")  # gpu4 up past gpu1 wraps to the last
        await pilot_until(pilot, lambda: view.selected == "gpu5", "k never wrapped to gpu5", 30)


async def test_a_new_state_updates_only_what_changed_and_keeps_the_widgets() -> None:
    first = mixed_fleet()
    hosts = list(first.hosts)
    hosts[4] = HostState(parse_host("gpu5"), "live", latency_ms=7.0, snapshot=snapshots(1, 9, 2, "gpu5")[-1])
    second = FleetState(tuple(hosts), first.time + 1)
    fleet = StandInFleet([first], interval=0)
    app = fleet_app(fleet)
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        before = blocks(app)
        kept = before["gpu1"].host
        fleet.states = [second]
        app.query_one(FleetView).poll()
        await pilot.pause()
        after = blocks(app)
        assert all(after[name] is before[name] for name in before)  # no widget rebuilt
        assert after["gpu1"].host is kept  # an unchanged host is not even recomputed
        text = fleet_text(app)
        assert "gpu5  live 7 ms" in text and "1 of 9 GPUs idle · 5 hosts (3 live)" in text


def _with_util(state: FleetState, host: int, gpu: int, util: float, name: str | None = None) -> FleetState:
    """``state`` with one GPU's utilisation (and name) changed (a new snapshot document, as a new line brings)."""
    hosts = list(state.hosts)
    doc = dict(hosts[host].snapshot or {})
    new = {"gpu_util": util, **({"name": name} if name else {})}
    doc["devices"] = [dict(d, **new) if d["index"] == gpu else d for d in doc["devices"]]
    hosts[host] = dataclasses.replace(hosts[host], snapshot=doc)
    return FleetState(tuple(hosts), state.time + 1)


async def test_one_gpu_that_changes_repaints_its_row_only_and_hosts_off_screen_catch_up_when_shown() -> None:
    first = live_fleet(16, 8, ticks=1)[0]
    fleet = StandInFleet([first], interval=0)
    app = fleet_app(fleet)
    async with app.run_test(size=(120, 24)) as pilot:
        await pilot.pause()
        view = app.query_one(FleetView)
        top, last = blocks(app)["gpu01"], blocks(app)["gpu16"]
        assert shown(top) and not shown(last)
        await pilot.press(*["down"] * 15)  # the arrows move the selection (the list follows), not just the scroll
        await pilot.pause()
        assert view.selected == "gpu16" and last.has_focus and shown(last)  # drawn once
        await pilot.press("home")
        await pilot.pause()
        assert view.selected == "gpu01" and shown(top) and not shown(last)
        rows = [top.render_line(y) for y in range(9)]
        fleet.states = [_with_util(_with_util(first, 0, 2, 97.0), 15, 0, 3.0)]
        view.draw(fleet.state())
        await pilot.pause()
        now = [top.render_line(y) for y in range(9)]
        assert [y for y in range(9) if now[y] is not rows[y]] == [3]  # GPU 2's row, nothing else made again
        assert "97%" in now[3].text and now[3].text != rows[3].text
        hosts = view.query_one(HostList)
        hosts.scroll_end(animate=False, immediate=True)  # scrolled (no focus moves): the last host drawn with 3%
        await pilot.pause()
        assert shown(last) and view.selected == "gpu01"
        hosts.scroll_home(animate=False, immediate=True)
        await pilot.pause()
        assert not shown(last)
        fleet.states = [_with_util(fleet.states[0], 15, 0, 4.0, "NVIDIA Z9 TEST")]  # another while away
        view.draw(fleet.state())
        await pilot.pause()
        await pilot.press("pagedown")  # the page keys scroll the list
        await pilot_until(pilot, lambda: hosts.scroll_y > 0, "pagedown never scrolled", 30)
        hosts.scroll_end(animate=False, immediate=True)
        await pilot.pause()
        assert " 0 Z9 TEST " in screen_text(app)  # its last state, not the one drawn before
        await pilot.press("end")
        await pilot_until(pilot, lambda: view.selected == "gpu16", "end never went to the last host", 30)


async def test_signals_on_a_remote_host_are_confirmed_and_refused_for_simulated_processes() -> None:
    app = fleet_app(StandInFleet([mixed_fleet()], interval=0, ssh=STANDIN_SSH))
    async with app.run_test(size=(120, 40)) as pilot:
        await open_first_host(pilot)
        await pilot.press("T")
        await pilot_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        # y is handled after press returns under load: wait for its answer, not for the workers of the moment
        await pilot_until(
            pilot, lambda: any("is simulated: nothing to send SIGTERM to" in n for n in notes(app)), "no refusal", 30
        )


async def test_readonly_never_asks_to_signal_a_remote_process() -> None:
    app = fleet_app(StandInFleet([mixed_fleet()], interval=0), readonly=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_first_host(pilot)
        await pilot.press("K")
        note = "Read-only mode (--readonly): signals are off"
        await pilot_until(pilot, lambda: any(note in n for n in notes(app)), "K was never refused", 30)
        assert isinstance(app.screen, HostScreen)  # the key was handled (its note) and asked nothing


async def test_sigterm_through_ssh_reaches_a_real_process_on_the_host() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        doc = snapshots(1, 4, 1, "gpu9")[-1]
        doc["simulated"] = False
        real = {**doc["processes"][0], "pid": child.pid, "simulated": False, "command": "python sleeper.py",
                "create_time": psutil.Process(child.pid).create_time()}  # fmt: skip
        doc["processes"] = [real]
        state = FleetState((HostState(parse_host("bob@gpu9"), "live", latency_ms=3, snapshot=doc),), 0.0)
        gpumon = f"{sys.executable} -m gpumon"
        app = fleet_app(StandInFleet([state], interval=0, ssh=STANDIN_SSH, gpumon=gpumon))
        async with app.run_test(size=(120, 40)) as pilot:
            await open_first_host(pilot)
            await pilot.press("T", "y")
            # under load T and y are handled after press returns: no worker to wait for yet, and a blocking
            # wait_until starved the loop that would run them; the app runs while the test waits
            await pilot_until(pilot, lambda: child.poll() is not None, "the process never ended", 60)
            sent = f"Sent SIGTERM to PID {child.pid} on bob@gpu9"
            await pilot_until(pilot, lambda: any(sent in n for n in notes(app)), f"never said {sent!r}", 30)
        assert child.returncode == -signal.SIGTERM
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=10)


async def test_without_a_fleet_the_gpus_view_comes_first_and_the_fleet_shows_this_machine() -> None:
    app = make_app(gpus=2)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        assert app.view == "gpus"
        await pilot.press("h")
        await pilot.pause()
        text = fleet_text(app)
        assert app.view == "fleet"
        assert "0 of 2 GPUs idle · 1 host (1 live)" in text and "trainbox  live" in text
        assert "Add hosts: gpumon --hosts a,b or [fleet] hosts in" in text and "config.toml" in text
        await pilot.press("enter")  # this machine: its own GPUs view
        await pilot_until(pilot, lambda: app.view == "gpus")
        await pilot.press("alt+h")
        await pilot_until(pilot, lambda: app.view == "fleet")


def test_a_stale_host_keeps_its_last_gpus_dimmed_and_counted() -> None:
    state = mixed_fleet()
    stale = dataclasses.replace(state.hosts[2])
    assert stale.link == "stale" and len(stale.gpus) == 2
    assert state.totals() == (1, 8)  # live and stale hosts' GPUs count; down and connecting have none


async def test_an_open_host_screen_follows_the_hosts_new_states() -> None:
    states = live_fleet(2, 2, ticks=2)
    fleet = StandInFleet(states[:1], interval=0)
    app = fleet_app(fleet)
    async with app.run_test(size=(120, 40)) as pilot:
        await open_first_host(pilot)
        screen = app.screen
        assert isinstance(screen, HostScreen) and len(screen.history.tail(("gpu", 0, "util"))) == 1
        fleet.states = states[1:]
        app.query_one(FleetView).draw(fleet.state())
        await pilot.pause()
        assert screen.state is states[1].hosts[0]
        assert len(screen.history.tail(("gpu", 0, "util"))) == 2  # its panels' history grows as samples come


async def test_switching_view_at_once_keeps_the_new_views_focus(monkeypatch) -> None:
    """`r` pressed before the Fleet view's first refresh: its deferred focus must not pull focus back."""
    from gpumon.tui.views.runs.view import RunsView

    deferred: list[bool] = []  # the deferred focus ran: a fixed pause beside CPU hogs may end before it did
    focus_if_shown = FleetView._focus_if_shown

    def counted(self: FleetView) -> None:
        deferred.append(True)
        focus_if_shown(self)

    monkeypatch.setattr(FleetView, "_focus_if_shown", counted)
    app = fleet_app(StandInFleet([mixed_fleet()], interval=0))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("r")
        await pilot_until(pilot, lambda: deferred and app.view == "runs", "the deferred focus never ran")
        await pilot.pause()
        assert app.focused is not None and any(isinstance(w, RunsView) for w in app.focused.ancestors_with_self)


def test_a_fleet_without_its_own_ssh_signals_with_the_users_fleet_config(tmp_path: Path, monkeypatch) -> None:
    from gpumon.core.fleet.hosts import HostError
    from gpumon.tui.views.fleet.host_screen import ssh_and_gpumon

    class RayLike:  # a Ray cluster's fleet: no ssh of its own
        ssh = None
        gpumon = None

    monkeypatch.setenv("GPUMON_CONFIG_DIR", str(tmp_path))
    monkeypatch.delenv("GPUMON_SSH", raising=False)
    (tmp_path / "config.toml").write_text('[fleet]\nssh = "ssh -J bastion"\ngpumon = "~/venv/bin/gpumon"\n')
    assert ssh_and_gpumon(RayLike()) == (["ssh", "-J", "bastion"], ["~/venv/bin/gpumon"])
    (tmp_path / "config.toml").write_text('[fleet]\ngpumon = ""\n')
    with pytest.raises(HostError, match="gpumon is empty"):
        ssh_and_gpumon(RayLike())


async def test_the_fleet_view_looks_at_its_hosts_only_while_it_shows(monkeypatch) -> None:
    """Its look for a changed link (5 a second) went on while another view showed, each only marking it stale.
    Counted: looks while hidden; the view shown again draws the state that came meanwhile in the key's frame."""
    fleet = StandInFleet([mixed_fleet()], interval=0)
    app = fleet_app(fleet)
    looks: list[bool] = []
    poll = FleetView.poll

    def counted(self: FleetView) -> None:
        looks.append(bool(self.display))
        poll(self)

    monkeypatch.setattr(FleetView, "poll", counted)
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot_until(pilot, lambda: len(looks) >= 3, "the shown view never looked")  # 0.2 s apart
        await pilot.press("g")
        await pilot_until(pilot, lambda: app.view == "gpus", "g never showed the GPUs view")
        hidden_from = len(looks)
        # no look is the point: instead of a fixed 1.2 s (beside CPU hogs, maybe no tick of the event loop's
        # timers at all), a timer of the looks' own period ticks 6 times on the same loop
        ticks: list[bool] = []
        clock = app.set_interval(LOOK_S, lambda: ticks.append(True))
        await pilot_until(pilot, lambda: len(ticks) >= 6, "a timer of the looks' period never ticked 6 times")
        clock.stop()
        assert looks[hidden_from:] == []
        fleet.states[0] = _with_util(fleet.states[0], 0, 0, 3.0)  # came while hidden
        await pilot.press("h")
        await pilot_until(pilot, lambda: app.view == "fleet", "h never showed the fleet", 30)
        assert app.query_one(FleetView).state is fleet.states[0]  # drawn in the key's own frame (showing)
        await pilot_until(pilot, lambda: len(looks) > hidden_from + 2, "the view shown again never looked")


async def test_a_host_running_an_older_gpumon_opens_with_what_its_line_left_out_unknown() -> None:
    """A compact line as gpumon wrote it before 9db1656 (no uuid, process kind, swap, host time, per-core use):
    ``gpumon snapshot --json --watch --fields fleet --simulate 2`` run from ``git archive f1c1441``. Enter on such
    a host said "unreadable snapshot"; now it draws what the line has and says N/A for the rest, never a guess."""
    from gpumon.core.fleet.stream import decode_line
    from gpumon.core.model import Snapshot

    line = (Path(__file__).parent / "data" / "fleet" / "line-f1c1441.jsonl").read_text()
    doc = decode_line(line)
    snap = Snapshot.from_dict(doc)
    assert [d.uuid for d in snap.gpu.devices] == [None, None]  # keyed by index (the panels, the history)
    assert {p.kind for d in snap.gpu.devices for p in d.processes} == {None}
    assert (snap.host.swap_used, snap.host.swap_total, snap.host.time, snap.host.per_cpu) == (None, None, None, ())
    state = FleetState((HostState(parse_host("old"), "live", latency_ms=30.0, snapshot=doc),), 1.0)
    app = fleet_app(StandInFleet([state], interval=0))
    async with app.run_test(size=(120, 40)) as pilot:
        await open_first_host(pilot)
        screen = app.screen
        assert isinstance(screen, HostScreen)
        text = screen_text(app)
        assert "unreadable" not in text
        assert "GPU 1 · Simulated H100 80GB HBM3" in text and len(screen.query_one(ProcessTable).processes) == 3
        assert "N/A cores" in text and "swap N/A" in text
