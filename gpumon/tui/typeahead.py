"""Keys typed ahead go where the keys before them lead, in order (mixed into the app).

Textual hands each key to the widget focused when the app reads it, but a key's effects come later: focus
moves through a queued callback, a pushed screen composes in its own task. A burst read at once (keys typed
while a screen opens, a paste of ``ab<tab>cd``) was spread over the old focus: ``n`` then ``tab tab name``
sent the name to a form that did not exist yet. Here one key is in flight at a time: the next is handed
over only once this one has gone up the widgets it bubbles through, the app has run what it queued (a
focus change) and the screen on top has composed and mounted. Keys beyond ``HELD_MAX`` are dropped, with a
note saying so.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import TYPE_CHECKING

from textual import events
from textual.dom import DOMNode
from textual.screen import Screen

from gpumon.tui.textual_private.nodes import propagation_stopped

if TYPE_CHECKING:
    from textual.app import App

HELD_MAX = 512  # keys waiting at most; a paste is a Paste event, not keys
KEY_FRAME_S = 0.1  # after a key's way, how long work that can wait waits still: the key's frame is drawn first
STUCK_S = 5.0  # a key whose way could not be followed (its widget went away): the next is sent anyway


class KeysInOrder:
    """The app's side: ``on_event`` holds a key while the one before it is still on its way."""

    _held: deque[events.Key]
    _in_flight: object | None
    _stuck: asyncio.TimerHandle | None
    _dropped: int

    def _keys_init(self) -> None:
        self._held = deque()
        self._in_flight = None  # the token of the key on its way, None: none
        self._stuck = None
        self._dropped = 0
        self._settled_at = -KEY_FRAME_S  # when the last key's way ended (time.monotonic)

    def key_drawing(self) -> bool:
        """A key is on its way, or its way ended a moment ago: its frame (and what its view shown asked for after)
        may still be to draw. The work done ahead waits meanwhile (tui/ahead.py): a piece run between the key's way
        and its frame delayed that frame by the piece (20-45 ms of CPU at rest)."""
        return self.keys_waiting > 0 or time.monotonic() - self._settled_at < KEY_FRAME_S

    @property
    def keys_waiting(self) -> int:
        """Keys read and not yet handed on (a key still on its way counts too)."""
        return len(self._held) + (self._in_flight is not None)

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.Key) and not self._app.screen_stack:
            return  # the app is closing, its screens gone: a key still on its way (typed after `q`) goes nowhere
        if isinstance(event, events.Key) and not event.is_forwarded:
            if self._in_flight is not None or self._held:
                self._hold(event)
            else:
                await self._send(event)
            return
        await super().on_event(event)  # type: ignore[misc]

    def _hold(self, event: events.Key) -> None:
        if len(self._held) < HELD_MAX:
            self._held.append(event)
            return
        self._dropped += 1  # said once the keys held have caught up (_release)

    @property
    def _app(self) -> App[object]:
        return self  # type: ignore[return-value]

    async def _send(self, event: events.Key) -> None:
        app = self._app
        token = object()
        self._in_flight = token
        self._stuck = asyncio.get_running_loop().call_later(STUCK_S, self._release, token)
        target: DOMNode = app.focused or app.screen  # where App.on_event forwards it
        await super().on_event(event)  # type: ignore[misc]
        # not forwarded: a priority binding took it here; else followed once the target has handled it
        if not event.is_forwarded or not target.call_later(self._follow, event, target, token):
            self._settle(token)

    def _follow(self, event: events.Key, node: DOMNode, token: object) -> None:
        """After ``node`` has handled the key: on to its parent if the key went there, else settle."""
        if self._in_flight is not token:
            return
        parent = node.parent
        if propagation_stopped(event) or isinstance(node, Screen) or parent is None or parent is self:
            self._settle(token)  # the app reads a key bubbled to it before this call
        elif not parent.call_later(self._follow, event, parent, token):
            self._settle(token)

    def _settle(self, token: object) -> None:
        """Once the app has run what the key queued there (a focus change), ask the screen on top."""
        if not self._app.call_later(self._ask_screen, token):
            self._release(token)

    def _ask_screen(self, token: object) -> None:
        screen = self._app.screen
        if not screen.call_later(self._screen_ready, screen, token):
            self._release(token)

    def _screen_ready(self, screen: Screen[object], token: object) -> None:
        """The screen has composed and mounted; back on the app, after the focus its mounting asked for."""
        if not self._app.call_later(self._next, screen, token):
            self._release(token)

    def _next(self, screen: Screen[object], token: object) -> None:
        if self._app.screen is not screen:  # the key (or its screen's mounting) opened or closed another
            self._ask_screen(token)
            return
        self._release(token)

    def _release(self, token: object) -> None:
        if self._in_flight is not token:
            return
        self._in_flight = None
        self._settled_at = time.monotonic()
        if self._stuck is not None:
            self._stuck.cancel()
            self._stuck = None
        if self._held:
            self._app.call_later(self._send_held)
        elif self._dropped:  # one note per busy spell, with how many
            note = f"{self._dropped} keys dropped: gpumon was busy"
            self._dropped = 0
            self._app.notify(note, severity="warning", timeout=5, markup=False)

    async def _send_held(self) -> None:
        if self._in_flight is None and self._held:
            await self._send(self._held.popleft())
