"""The Escape key as quick as htop's.

A lone escape byte is either the Escape key or the start of a key's sequence (an arrow's ESC [ A, F1's ESC O P,
Alt+a's ESC a), so a terminal program waits a moment for the rest: htop 25 ms (ncurses' ESCDELAY), Textual
100 ms. Textual's input thread also checks that wait only when its ``select`` returns, which it does after
100 ms without input: a lone Escape acted ~100 ms late whatever the delay. ``QuickEscapeDriver`` wakes at
the end of the wait instead, so Escape acts ESCAPE_S after the key; a sequence, whose bytes a terminal (or
tmux) writes in one go, still arrives whole. ESCDELAY (ms), if set, is obeyed (Textual reads it).

Textual's loop also woke 10 times a second with no input, to look at its stop flag (most of gpumon's wake-ups at
rest): here the flag, set, writes a byte to a pipe the loop waits on too, so with no input and no escape pending
the loop sleeps until a key or the stop.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import sys
from codecs import getincrementaldecoder
from collections.abc import Callable
from threading import Event
from typing import TYPE_CHECKING, Any

from textual import constants
from textual.drivers.linux_driver import LinuxDriver
from textual.message import Message

if TYPE_CHECKING:
    from textual._parser import ParseError
    from textual._time import get_time
    from textual._xterm_parser import XTermParser
else:
    try:
        from textual._parser import ParseError
        from textual._time import get_time
        from textual._xterm_parser import XTermParser
    except ImportError:  # moved: Textual's own driver (quick_driver)
        ParseError = get_time = XTermParser = None

ESCAPE_S = 0.025  # htop's ESCDELAY: a lone escape is the Escape key once nothing follows it this long
POLL_S = 0.1  # Textual's: how often the input thread looks at its stop flag with no input


def quick_escape() -> None:
    if "ESCDELAY" not in os.environ:
        setattr(constants, "ESCAPE_DELAY", ESCAPE_S)  # noqa: B010 - read at each escape; Final for mypy only


class WakingEvent(Event):
    """A stop flag that, set, also writes a byte to ``fd`` (a pipe's write end that ``read_keys`` waits on)."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self.fd = fd

    def set(self) -> None:
        super().set()
        with contextlib.suppress(OSError):  # the pipe full of earlier stops (the loop drains it), or closed
            os.write(self.fd, b"x")


def read_keys(
    fileno: int, stop: Event, deliver: Callable[[Message], None], parser: Any, wake: int | None = None
) -> None:
    """Textual's input loop (LinuxDriver.run_input_thread), but the wait for the rest of a sequence ends on time.

    ``parser`` is an ``XTermParser``: its pending time-out (a lone escape's) bounds each ``select``. ``wake``: a
    pipe's read end that ``stop`` writes to when set (``WakingEvent``); with it the loop sleeps until input or the
    stop, else it looks at ``stop`` every POLL_S as Textual does."""
    selector = selectors.SelectSelector()
    selector.register(fileno, selectors.EVENT_READ)
    if wake is not None:
        selector.register(wake, selectors.EVENT_READ)
    decode = getincrementaldecoder("utf-8")().decode

    def wait() -> float | None:
        due = getattr(parser, "_timeout_time", None)  # Textual private; without it, Textual's own pace
        if due is None:
            return None if wake is not None else POLL_S
        return max(0.0, min(POLL_S, due - get_time()))

    def process(events: list[tuple[selectors.SelectorKey, int]], final: bool = False) -> None:
        if wake is not None and any(key.fd == wake for key, _mask in events):
            os.read(wake, 512)  # the stop's byte: drained, the flag is looked at next
            events = [(key, mask) for key, mask in events if key.fd != wake]
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
    """Textual's terminal driver with ``read_keys`` as its input loop, woken by its stop flag."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._wake_read, wake_write = os.pipe()
        os.set_blocking(wake_write, False)
        self.exit_event = WakingEvent(wake_write)

    def run_input_thread(self) -> None:
        parser = XTermParser(getattr(self, "_debug", False))
        read_keys(self.fileno, self.exit_event, self.process_message, parser, self._wake_read)

    def close(self) -> None:
        super().close()
        for fd in (self._wake_read, self.exit_event.fd):  # type: ignore[attr-defined]
            with contextlib.suppress(OSError):
                os.close(fd)


def quick_driver() -> type[LinuxDriver] | None:
    """The driver above, or None where Textual picks its own: TEXTUAL_DRIVER set, Windows, or Textual's parser
    moved."""
    if constants.DRIVER is not None or sys.platform == "win32" or XTermParser is None:
        return None
    return QuickEscapeDriver
