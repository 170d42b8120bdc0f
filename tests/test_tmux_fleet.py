"""The Fleet view in a real terminal at 80x24 and 200x60: a stand-in fleet of simulated hosts in every state."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import requires_tmux, wait_until
from tests.tmux_term import Tmux

pytestmark = [pytest.mark.tmux, requires_tmux]
ROOT = str(Path(__file__).resolve().parent.parent)


@pytest.mark.parametrize(("width", "height"), [(80, 24), (200, 60)])
def test_fleet_view_in_a_real_terminal(width: int, height: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", ROOT)  # python -m tests.fleet_data from any directory
    tmux = Tmux(width, height)
    try:
        tmux.start([sys.executable, "-m", "tests.fleet_data"])
        screen = tmux.wait_for("1 of 8 GPUs idle · 5 hosts (2 live)", "▶ gpu1", "live 23 ms", "authentication refused")
        assert "stale since" in screen and "connecting" in screen and "researcher" in screen
        assert "Traceback" not in screen
        if width >= 200:  # the wide columns: their frame may follow the first under load
            tmux.wait_for("ddp-c132", "3 busy · 1 idle · 90.9/320.0 GiB")
        tmux.keys("j")
        tmux.wait_for("▶ alice@gpu2:2222")
        tmux.keys("Enter")
        tmux.wait_for("processes · all GPUs · 3", "esc back to the fleet")
        tmux.keys("T")
        tmux.wait_for("Send SIGTERM to PID", "on alice@gpu2:2222?")
        tmux.keys("n")
        wait_until(lambda: "Send SIGTERM" not in tmux.screen(), timeout=5)
        tmux.keys("Escape")
        tmux.wait_for("▶ alice@gpu2:2222", "1 of 8 GPUs idle")
        tmux.keys("q")
        assert wait_until(tmux.pane_dead, timeout=10), tmux.screen()
        assert "Traceback" not in tmux.screen()
    finally:
        tmux.kill()
