"""Escape acts as quickly as htop's (textual_private/escape.py), and the keys whose sequences start with an escape still
arrive whole: through a real pseudo-terminal into the app's input loop, and through tmux into the app."""

from __future__ import annotations

import os
import pty
import sys
import threading
import time
import tty
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty, Queue

import pytest
from textual import constants
from textual._xterm_parser import XTermParser
from textual.message import Message

from gpumon.tui.textual_private.escape import ESCAPE_S, read_keys
from tests.conftest import requires_tmux, wait_until
from tests.tmux_term import Tmux

TEXTUAL_POLL_S = 0.1  # Textual's own loop looked at a lone escape's wait only this often


@dataclass
class Terminal:
    """The app's input loop reading the slave side of a pty; the test types on the master side."""

    master: int
    keys: Queue[tuple[float, str]] = field(default_factory=Queue)

    def type(self, data: bytes) -> float:
        sent = time.monotonic()
        os.write(self.master, data)
        return sent

    def next_key(self, timeout: float = 10.0) -> tuple[float, str]:
        return self.keys.get(timeout=timeout)

    def quiet(self, seconds: float = 0.3) -> list[str]:
        """Keys that arrive over the next ``seconds`` (none expected)."""
        extra = []
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                extra.append(self.keys.get(timeout=left)[1])
            except Empty:
                break
        return extra


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> Iterator[Terminal]:
    monkeypatch.setattr(constants, "ESCAPE_DELAY", ESCAPE_S)  # what `gpumon` sets (quick_escape)
    master, slave = pty.openpty()
    tty.setraw(slave)  # as Textual's driver leaves the terminal: every byte as typed
    term = Terminal(master)

    def deliver(message: Message) -> None:
        key = getattr(message, "key", None)
        if key is not None:
            term.keys.put((time.monotonic(), key))

    stop = threading.Event()
    thread = threading.Thread(target=read_keys, args=(slave, stop, deliver, XTermParser()), daemon=True)
    thread.start()
    try:
        yield term
    finally:
        stop.set()
        thread.join(timeout=5)
        os.close(master)
        os.close(slave)
        assert not thread.is_alive(), "the input loop did not stop on its flag"


def test_a_lone_escape_is_the_escape_key_after_htops_wait_not_textuals_poll(terminal: Terminal) -> None:
    waits = []
    for _ in range(5):
        sent = terminal.type(b"\x1b")
        arrived, key = terminal.next_key()
        assert key == "escape"
        waits.append(arrived - sent)
    # Textual's loop: never under its 100 ms poll (select(0.1) returns only then); here ESCAPE_S (25 ms) plus a
    # thread's wake-up, which a busy machine can delay once or twice, not five times in a row
    assert min(waits) < TEXTUAL_POLL_S * 0.6, [f"{w * 1000:.0f} ms" for w in waits]
    assert min(waits) >= ESCAPE_S * 0.9  # it still waits for the rest of a sequence


@pytest.mark.parametrize(
    ("sequence", "key"),
    [
        (b"\x1b[A", "up"),
        (b"\x1b[B", "down"),
        (b"\x1bOP", "f1"),  # help, as in htop
        (b"\x1b[15~", "f5"),
        (b"\x1b[21~", "f10"),  # quit, as in htop
        (b"\x1b[1;3B", "alt+down"),
        (b"\x1ba", "alt+a"),
        (b"\x1b[H", "home"),
    ],
)
def test_a_keys_escape_sequence_arrives_as_that_key(terminal: Terminal, sequence: bytes, key: str) -> None:
    terminal.type(sequence)
    assert terminal.next_key()[1] == key
    assert terminal.quiet() == []  # no stray escape, [ or A after it


def test_a_sequence_split_across_writes_within_the_wait_is_still_one_key(
    terminal: Terminal, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(constants, "ESCAPE_DELAY", 2.0)  # ESCDELAY=2000: room for a slow link (ssh)
    terminal.type(b"\x1b")
    time.sleep(0.15)  # past Textual's poll: the wait is the delay, not the poll
    terminal.type(b"[A")
    assert terminal.next_key()[1] == "up"
    assert terminal.quiet() == []


def test_escape_then_a_letter_after_the_wait_are_two_keys(terminal: Terminal) -> None:
    terminal.type(b"\x1b")
    assert terminal.next_key()[1] == "escape"
    terminal.type(b"g")
    assert terminal.next_key()[1] == "g"


@pytest.mark.tmux(100, 30)
@requires_tmux
def test_in_tmux_escape_closes_the_help_and_the_form_and_f_keys_and_arrows_still_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tmux: Tmux
) -> None:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path / "state"))
    tmux.start([sys.executable, "-m", "gpumon", "--simulate", "2", "--interval", "0.5"])
    tmux.wait_for("SIMULATED", "processes · GPU 0")
    tmux.keys("F1")  # ESC O P through tmux: the help, not an Escape then O then P
    tmux.wait_for("gpumon keys", "Views and the app")
    tmux.keys("End")  # an escape sequence (ESC O F): the help scrolls to its end
    tmux.wait_for("census")
    assert "Views and the app" not in tmux.screen()
    tmux.keys("Home")  # and back to its top
    tmux.wait_for("Views and the app")
    tmux.keys("Escape")
    assert wait_until(lambda: "every key (this screen)" not in tmux.screen(), timeout=20), tmux.screen()
    tmux.wait_for("processes · GPU 0")
    tmux.keys("M-r")  # alt+r (ESC r): the Runs view
    tmux.wait_for("runs · 0")
    tmux.keys("n")
    tmux.wait_for("New run", "on alert")
    tmux.keys("Escape")
    assert wait_until(lambda: "New run" not in (s := tmux.screen()) and "runs · 0" in s, timeout=20), tmux.screen()
    tmux.keys("?")
    tmux.wait_for("gpumon keys")
    tmux.keys("Escape")
    closed = wait_until(lambda: "gpumon keys" not in (s := tmux.screen()) and "runs · 0" in s, timeout=20)
    assert closed, tmux.screen()
    tmux.keys("F10")  # quit, as in htop: ESC [ 2 1 ~ arrives whole
    assert wait_until(tmux.pane_dead, timeout=20), tmux.screen()
    assert "Traceback" not in tmux.screen()
