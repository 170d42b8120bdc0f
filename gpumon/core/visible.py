"""Text that is not ours (a run's name and arguments, its log lines) made safe to print: control characters
shown as ``less`` shows them, never sent to the terminal raw.

A run's name holding ``ESC [2J`` would clear the screen of whoever lists runs, an OSC (``ESC ]0;...BEL``)
would set their terminal's title or swallow the output after it, a newline would split a table's row.
``visible`` writes each control character as text: ``^[`` for ESC, ``^G`` for BEL, ``^J`` for a newline,
``^?`` for DEL, ``<U+009B>`` for a C1 control and ``<U+202E>`` for a character that reorders or hides text
(bidi overrides, zero-width ones). ``visible_log`` does the same to a log line but keeps its tabs, and its
colours (SGR: ``ESC [ ... m``) only where they will be drawn as colours (a terminal, the log pane): any
other escape (clear, move, title) is shown, never obeyed; a progress bar's cursor-up and erase-line are dropped.
"""

from __future__ import annotations

import re

# C0 and DEL, C1, and the format characters that reorder or hide text (bidi embeddings, overrides, isolates,
# marks; zero-width spaces and joiners are left out: emoji sequences use them).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b\u200e\u200f\u2028-\u202e\u2066-\u2069\ufeff]")
_LOG_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b\u200e\u200f\u2028-\u202e\u2066-\u2069\ufeff]")
SGR = re.compile(r"(\x1b\[[0-9;:]*m)")  # a group: re.split keeps the sequences, text and SGR alternating
# A progress bar's own layout: cursor up (tqdm's nested bars end each frame with ESC [A) and erase in line (ESC [K).
# A log shown line by line has each line's latest frame already (logs/terminal.py): they say nothing more.
BAR_LAYOUT = re.compile(r"\x1b\[[0-9]*[AK]")


def _shown(found: re.Match[str]) -> str:
    code = ord(found.group())
    if code < 0x20:
        return "^" + chr(code + 0x40)
    if code == 0x7F:
        return "^?"
    return f"<U+{code:04X}>"


def visible(text: str) -> str:
    """``text`` with every control character as printable text (``^[[2J``), on one line."""
    return text if _CONTROL.search(text) is None else _CONTROL.sub(_shown, text)


def visible_log(line: str, colour: bool) -> str:
    """A log line (or lines: newlines are kept) as it may be printed: tabs kept, colour sequences kept with
    ``colour`` (a terminal) and dropped without (a pipe, a file), every other control character shown."""
    if "\x1b" in line:
        line = BAR_LAYOUT.sub("", line)
        if colour:
            parts = SGR.split(line)
            return "".join(_LOG_CONTROL.sub(_shown, part) if i % 2 == 0 else part for i, part in enumerate(parts))
        line = SGR.sub("", line)
    return line if _LOG_CONTROL.search(line) is None else _LOG_CONTROL.sub(_shown, line)
