"""The GPUs view's nvitop habits in a real terminal: compact mode shows 8 GPUs at 80x24, / filters the processes."""

from __future__ import annotations

import re
import sys

import pytest

from tests.conftest import requires_tmux
from tests.tmux_term import Tmux

pytestmark = [pytest.mark.tmux(80, 24), requires_tmux]


def test_compact_mode_shows_eight_gpus_at_80x24_and_slash_filters(tmux: Tmux) -> None:
    tmux.start([sys.executable, "-m", "gpumon", "--simulate", "8", "--interval", "0.5"])
    screen = tmux.wait_for("GPU 0", "processes · GPU 0")
    assert "GPU 7" not in screen  # five-line panels: a few GPUs at a time
    tmux.keys("c")
    screen = tmux.wait_for(*(f" {i} Simulated H100" for i in range(8)), "processes · GPU 0")
    assert all(re.search(rf" {i} Simulated H100.*°C .* W", screen) for i in range(8))
    assert "Traceback" not in screen
    tmux.keys("a", "/")
    tmux.wait_for("filter (F4 /)")  # the box, labelled on its border
    tmux.keys("alice", "Enter")
    screen = tmux.wait_for("filter 'alice'")
    rows = [line for line in screen.splitlines() if re.search(r"\b50000\d\d\b", line)]
    assert rows and all("alice" in line for line in rows)
    tmux.keys("q")
