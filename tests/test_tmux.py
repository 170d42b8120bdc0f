"""A real terminal: gpumon in tmux, read the pane, press keys, quit."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import requires_tmux, wait_until
from tests.tmux_term import Tmux

pytestmark = [pytest.mark.tmux, requires_tmux]


def test_simulated_monitor_in_a_real_terminal(tmux: Tmux) -> None:
    tmux.start([sys.executable, "-m", "gpumon", "--simulate", "2", "--interval", "0.5"])
    screen = tmux.wait_for("SIMULATED", "GPU 0", "UTIL", "processes · GPU 0", "5000000")
    assert "Traceback" not in screen
    tmux.keys("1")
    tmux.wait_for("processes · GPU 1", "5000010")
    tmux.keys("a")
    tmux.wait_for("processes · all GPUs · 3")
    tmux.keys("?")
    tmux.wait_for("gpumon keys", "quit")
    tmux.keys("End")  # the help scrolls: its last lines are reached
    tmux.wait_for("census")
    tmux.keys("Escape")
    tmux.wait_for("processes · all GPUs")  # the help closed (scrolled, its title is gone too)
    tmux.keys("q")
    assert wait_until(tmux.pane_dead, timeout=10), tmux.screen()
    assert "Traceback" not in tmux.screen()


def test_no_gpu_machine_starts_and_says_why(tmux: Tmux) -> None:
    from gpumon.core.gpu import open_gpu_source

    if open_gpu_source().name != "none":
        pytest.skip("a GPU is visible here")
    tmux.start([sys.executable, "-m", "gpumon"])
    screen = tmux.wait_for("No GPU shown", "NVML library not found", "cores")
    assert "Traceback" not in screen
    tmux.keys("q")
    assert wait_until(tmux.pane_dead, timeout=10)
