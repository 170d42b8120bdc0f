"""The Escape key as quick as htop's.

A lone escape byte is either the Escape key or the start of a key's sequence (an arrow's ESC [ A, F1's ESC O P,
Alt+a's ESC a), so a terminal program waits a moment for the rest: htop 25 ms (ncurses' ESCDELAY), Textual
100 ms. Textual's input thread also checks that wait only when its ``select`` returns, which it does after
100 ms without input: a lone Escape acted ~100 ms late whatever the delay. ``QuickEscapeDriver`` wakes at
the end of the wait instead, so Escape acts ESCAPE_S after the key; a sequence, whose bytes a terminal (or
tmux) writes in one go, still arrives whole. ESCDELAY (ms), if set, is obeyed (Textual reads it).
"""

from __future__ import annotations

import os
import selectors
from codecs import getincrementaldecoder
from collections.abc import Callable
from threading import Event
from typing import Any

from textual import constants
from textual._parser import ParseError
from textual._time import get_time
from textual._xterm_parser import XTermParser
from textual.drivers.linux_driver import LinuxDriver
from textual.message import Message

ESCAPE_S = 0.025  # htop's ESCDELAY: a lone escape is the Escape key once nothing follows it this long
POLL_S = 0.1  # Textual's: how often the input thread looks at its stop flag with no input


def quick_escape() -> None:
    if "ESCDELAY" not in os.environ:
        setattr(constants, "ESCAPE_DELAY", ESCAPE_S)  # noqa: B010 - read at each escape; Final for mypy only


def read_keys(fileno: int, stop: Event, deliver: Callable[[Message], None], parser: Any) -> None:
    """Textual's input loop (LinuxDriver.run_input_thread), but the wait for the rest of a sequence ends on time.

    ``parser`` is an ``XTermParser``: its pending time-out (a lone escape's) bounds each ``select``."""
    selector = selectors.SelectSelector()
    selector.register(fileno, selectors.EVENT_READ)
    decode = getincrementaldecoder("utf-8")().decode

    def wait() -> float:
        due = getattr(parser, "_timeout_time", None)  # Textual private; without it, Textual's own pace
        return POLL_S if due is None else max(0.0, min(POLL_S, due - get_time()))

    def process(events: list[tuple[selectors.SelectorKey, int]], final: bool = False) -> None:
        for index, (_key, mask) in enumerate(events):
            if mask & selectors.EVENT_READ:
                data = decode(os.read(fileno, 4096), final=final and index == len(events) - 1)
                if not data:  # a piped stdin at its end
                    break
                for event in parser.feed(data):
                    deliver(event)
        for event in parser.tick():
            deliver(event)

    try:
        while not stop.is_set():
            process(selector.select(wait()))
        selector.unregister(fileno)
        process(selector.select(POLL_S), final=True)
    finally:
        selector.close()
        try:
            for _event in parser.feed(""):
                pass
        except (EOFError, ParseError):  # as Textual: input that ends mid-sequence
            pass


class QuickEscapeDriver(LinuxDriver):
    """Textual's terminal driver with ``read_keys`` as its input loop."""

    def run_input_thread(self) -> None:
        read_keys(self.fileno, self.exit_event, self.process_message, XTermParser(self._debug))
