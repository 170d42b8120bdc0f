"""States of the app and its nodes that Textual keeps in private attributes, read with a public fallback.

Each reader falls back to what public Textual says where the private is gone (tests/test_textual_private.py).
"""

from __future__ import annotations

from typing import Any

from textual.app import App
from textual.binding import BindingsMap
from textual.message import Message
from textual.screen import Screen
from textual.widget import Widget


def exiting(app: App[Any]) -> bool:
    """``app.exit()`` was asked (its return value may still be on its way): the public ``is_running`` says so
    only once the app has stopped."""
    return bool(getattr(app, "_exit", False))


def mounted_screen(app: App[Any], name: str) -> Screen[Any]:
    """The installed screen ``name``, composed and mounted now (Textual's first step of ``push_screen``), so that
    its first showing only draws it; the screen alone (mounted by ``push_screen``) where that step moved."""
    try:
        return app._get_screen(name)[0]
    except (AttributeError, TypeError, IndexError):
        return app.get_screen(name)


def taken_down(widget: Widget) -> bool:
    """The widget is being closed or pruned (its messages still come as its children go); without those flags,
    whether it is still attached."""
    try:
        return bool(widget._closing or widget._pruning)
    except AttributeError:
        return not widget.is_attached


def propagation_stopped(message: Message) -> bool:
    """``message.stop()`` was called: it bubbles no further. Where unknown, False (the caller follows it to the
    screen, a few callbacks more)."""
    return bool(getattr(message, "_stop_propagation", False))


def key_bindings(node: Widget) -> BindingsMap | None:
    """The node's own bindings map (what its footer keys are made from), to change in place; None where unknown."""
    bindings = getattr(node, "_bindings", None)
    return bindings if isinstance(bindings, BindingsMap) else None
