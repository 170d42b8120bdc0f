"""The Escape key as quick as htop's: Textual waits 100 ms after a lone escape byte for the rest of a key's
sequence (an arrow's ESC [ A); htop waits 25 ms. ESCDELAY (ms), if set, is obeyed (Textual reads it)."""

from __future__ import annotations

import os

ESCAPE_S = 0.025  # htop's ESCDELAY: a lone escape is the Escape key once nothing follows it this long


def quick_escape() -> None:
    if "ESCDELAY" not in os.environ:
        from textual import constants

        setattr(constants, "ESCAPE_DELAY", ESCAPE_S)  # noqa: B010 - read at each escape; Final for mypy only
