"""Textual's footer, drawn the same, built once per set of keys.

Textual's Footer composes its keys anew whenever the screen says its bindings changed: each focus move,
each view switch, each screen closed over it, three times for one key at times, and a key widget costs a
style pass or three (100 ms and more a time on a busy machine). This one compares the keys it would show
with the keys it shows and, when they differ, shows the set built the first time those keys were wanted:
a set is built once and hidden while another shows, so going back to a view costs no widget.
"""

from __future__ import annotations

from collections import OrderedDict

from textual.compose import compose
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer

#: What a set of keys is, as the footer draws it: per key (key, action, label, enabled, tooltip, group).
Keys = tuple[tuple[str, str, str, bool, str, str | None], ...]

SETS_MAX = 24  # sets kept: views x focus places x enabled states; the least recent one goes beyond


class KeysFooter(Footer):
    """A drop-in Footer: the same widgets, shown from a cache of sets."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._sets: OrderedDict[Keys, list[Widget]] = OrderedDict()
        self._shown: Keys | None = None

    def keys_now(self) -> Keys:
        """The keys the screen offers now, in the footer's terms."""
        shown = []
        for key, (_, binding, enabled, tooltip) in self.screen.active_bindings.items():
            if binding.show or key == self.app.COMMAND_PALETTE_BINDING:
                group = binding.group.description if binding.group is not None else None
                shown.append((binding.key, binding.action, binding.description, enabled, tooltip, group))
        return tuple(shown)

    def bindings_changed(self, screen: Screen[object]) -> None:
        self._bindings_ready = True
        if not screen.app.app_focus:
            return
        if self.is_attached and screen is self.screen:
            self.call_after_refresh(self.show_keys)

    async def show_keys(self) -> None:
        """Show the set for the keys offered now (built now if never wanted before)."""
        if not self.is_attached:
            return
        keys = self.keys_now()
        if keys == self._shown:
            return
        with self.app.batch_update():
            for widget in self._sets.get(self._shown, []) if self._shown is not None else []:
                widget.display = False
            self._shown = keys
            widgets = self._sets.pop(keys, None)
            if widgets is not None:
                self._sets[keys] = widgets  # the most recent last
                for widget in widgets:
                    widget.display = True
                return
            widgets = compose(self)  # Footer.compose: the keys the screen offers now
            self._sets[keys] = widgets
            while len(self._sets) > SETS_MAX:
                _, old = self._sets.popitem(last=False)
                for widget in old:
                    widget.remove()
            await self.mount_all(widgets)

    async def recompose(self) -> None:
        """Textual's way to redraw the keys: here, the set for the keys offered now."""
        await self.show_keys()
