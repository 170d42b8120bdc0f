"""A Select that survives its own first mount on a loaded machine.

Textual's ``Select`` sets its value when it mounts, and showing the value asks its ``SelectCurrent`` for the
label that ``SelectCurrent`` composes: the form built ahead (tui/views/runs/launching.py ``prepare_form``)
met a ``SelectCurrent`` not composed yet at load 20 and the app died of ``NoMatches '#label'``. Here the
value is shown once the label exists instead.
"""

from __future__ import annotations

import time
from typing import Any

from textual.css.query import NoMatches
from textual.widgets import Select

from gpumon.tui.widgets.focus_look import FocusLook

WAIT_S = 10.0  # how long to wait for the label; a label never composed leaves the prompt shown


class FormSelect(FocusLook, Select[Any]):
    def _watch_value(self, value: Any) -> None:  # one parameter: Textual passes (old, new) to two
        self._show(value, time.monotonic() + WAIT_S)

    def _show(self, value: Any, until: float) -> None:
        try:
            super()._watch_value(value)
        except NoMatches:
            if time.monotonic() < until:
                self.set_timer(0.02, lambda: self._show_later(value, until))

    def _show_later(self, value: Any, until: float) -> None:
        if self.value == value and self.is_attached:  # not changed again since, and still on a screen
            self._show(value, until)
