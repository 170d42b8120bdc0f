"""Keys typed ahead, in a real terminal: a burst sent through tmux in one go lands where each key was meant for.

The burst reaches gpumon before the screens it opens exist (the launch form is built at `n`); each key must
still go to the screen and the field the keys before it lead to, in order, never to the screen beneath.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpumon.core.runs.record.store import RunStore
from tests.conftest import requires_tmux, wait_until
from tests.tmux_term import Tmux, start_simulated

pytestmark = [pytest.mark.tmux(100, 30), requires_tmux]


def test_a_burst_opens_the_form_and_types_into_its_program_field(tmux: Tmux, run_home: Path) -> None:
    start_simulated(tmux)
    # one send-keys: the Runs view, the form, two tabs to the program field, a typo'd program, enter
    tmux.keys("r", "n", "Tab", "Tab", "trian.py", "Enter")
    screen = tmux.wait_for("program not found: trian.py", timeout=30)  # the form refused that program
    assert re.search(r"program\s+trian\.py", screen), screen  # typed into the program field, whole
    assert "New run" in screen  # the form stays, with its error
    started = RunStore(run_home).list()
    assert started == [], f"a run started from the burst: {[r.spec.program for r in started]}"
    tmux.keys("Escape")
    tmux.wait_for("runs · 0")
    assert "Traceback" not in tmux.screen()


def test_a_tab_in_a_burst_moves_the_keys_after_it_to_the_next_field(tmux: Tmux, run_home: Path) -> None:
    start_simulated(tmux)
    tmux.keys("r")
    tmux.wait_for("runs · 0")
    tmux.keys("n")
    tmux.wait_for("New run", "on alert")
    tmux.keys("Tab", "Tab")  # kind, preset, then the program field
    assert wait_until(lambda: "blank: the kind's own trainer" in tmux.screen(), timeout=30), tmux.screen()
    tmux.keys("ab", "Tab", "cd")  # one write: ab into the program, cd into the arguments
    screen = wait_until(lambda: re.search(r"arguments\s+cd", s := tmux.screen()) and s, timeout=30)
    assert screen, tmux.screen()
    assert re.search(r"program\s+ab\s", screen), screen
    tmux.keys("Escape")
    tmux.wait_for("runs · 0")
    assert RunStore(run_home).list() == []
