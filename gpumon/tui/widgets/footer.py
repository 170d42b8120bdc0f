"""Textual's footer, drawn the same, built once per set of keys.

Textual's Footer composes its keys anew whenever the screen says its bindings changed: each focus move,
each view switch, each screen closed over it, three times for one key at times, and a key widget costs a
style pass or three (100 ms and more a time on a busy machine). This one compares the keys it would show
with the keys it shows and, when they differ, shows the set built the first time those keys were wanted:
a set is built once (in a container of its own) and hidden while another shows, so going back to a view
costs no widget and no key drawn anew.

Keys that do not fit the width are left out whole (Textual's cut the last one mid-word: ``! Aler``, a bare
``!``, ``q qui``): the views' keys go first, then the view's own from its last, then help, then quit.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from contextlib import suppress
from weakref import WeakKeyDictionary

from textual.compose import compose
from textual.containers import Horizontal
from textual.events import Resize
from textual.geometry import Size
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer

from gpumon.tui.textual_private.footer import FooterKey, asks_no_layout, bindings_ready, set_bindings_ready

#: What a set of keys is, as the footer draws it: per key (key, action, label, enabled, tooltip, group).
Keys = tuple[tuple[str, str, str, bool, str, str | None], ...]

LAST_LEFT_OUT = ("quit", "help")  # left out last, quit after help: what htop's footer always shows
SETS_MAX = 24  # sets kept: views x focus places x enabled states; the least recent one goes beyond


class KeySet(Horizontal):
    """One set of keys, as Textual's footer lays its keys out; shown or hidden whole. A key's own display
    toggled drew it anew (Textual drops a widget's drawn lines when its display changes): a set hidden and
    shown again keeps its keys' drawn lines."""

    DEFAULT_CSS = "KeySet { width: 1fr; height: 1; }"

    def __init__(self, widgets: list[Widget]) -> None:
        super().__init__(*widgets)
        self.members = widgets


class KeysFooter(Footer):
    """A drop-in Footer: the same widgets, shown from a cache of sets."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._sets: OrderedDict[Keys, KeySet] = OrderedDict()
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
        set_bindings_ready(self)
        if not screen.app.app_focus:
            return
        if self.is_attached and screen is self.screen:
            self.call_after_refresh(self.show_keys)

    def show_built(self) -> bool:
        """Show the set for the keys offered now if it was built before (True), at once: a view switch
        calls this so that its keys show in the view's own frame and layout, not in a second one."""
        if not self.is_attached:
            return False
        keys = self.keys_now()
        if keys == self._shown:
            return True
        if keys not in self._sets:
            return False
        with self.app.batch_update():
            self._show(keys)
        return True

    def _show(self, keys: Keys) -> KeySet | None:
        """Hide the set shown, show ``keys``'s if built (returned), else None."""
        if self._shown is not None and self._shown in self._sets:
            self._set_display(self._sets[self._shown], False)
        self._shown = keys
        keyset = self._sets.pop(keys, None)
        if keyset is not None:
            self._sets[keys] = keyset  # the most recent last
            self._fit(keyset)
        return keyset

    def _set_display(self, widget: Widget, display: bool, layout: bool = True) -> None:
        """Show or hide a set or a key, the footer asking for the layout (unless ``layout`` is False: a key of a
        hidden set): the widget's own request reaches the screen from its own message queue, often after the frame
        the switch is drawn in, and costs a second layout of the whole screen (the footer's arrangement already
        changed with the display)."""
        if widget.display == display:
            return
        widget.display = display
        asks_no_layout(widget)  # the footer asks for it
        if layout:
            self.refresh(layout=True)

    async def show_keys(self) -> None:
        """Show the set for the keys offered now (built now if never wanted before)."""
        if not self.is_attached:
            return
        keys = self.keys_now()
        if keys == self._shown:
            return
        with self.app.batch_update():
            if self._show(keys) is not None:
                return
            keyset = self._build(keys)
            await self.mount(keyset)
            self._fit(keyset)

    def _build(self, keys: Keys) -> KeySet:
        keyset = KeySet(compose(self))  # Footer.compose: the keys the screen offers now
        keyset.display = False  # shown once measured (_fit): a key cut for a frame is a key cut
        self._sets[keys] = keyset
        while len(self._sets) > SETS_MAX:
            _, old = self._sets.popitem(last=False)
            old.remove()
        return keyset

    def build_ahead(self) -> None:
        """Build (hidden) the set for the keys the screen offers now, unless built: the app calls this with the
        focus set, unseen, where a view's key will put it, so that the view's first showing finds its keys built
        (building them then mounted ~10 keys and styled them on that key's path: 50-90 ms)."""
        keys = self.keys_now()
        if bindings_ready(self) and self.is_attached and keys not in self._sets:
            self.mount(self._build(keys))

    def mounted(self) -> bool:
        """Whether each set built is mounted: on a busy machine ~50 keys built ahead take a second or more to mount
        (each its own message queue), and a set not mounted is neither measured nor laid out."""
        return all(keyset.is_mounted for keyset in self._sets.values())

    def sets_ahead(self) -> list[KeySet]:
        """The sets built ahead, mounted and not shown: each measured and drawn in a piece of work of its own (the
        app's work ahead, behind any key: all of them at once took ~45 ms of CPU at rest)."""
        return [keyset for keys, keyset in self._sets.items() if keys != self._shown and keyset.is_mounted]

    def measure_ahead(self, keyset: KeySet) -> None:
        """Measure the set's keys (kept: _width): the first showing of a set measured its ~18 keys on its view key's
        path (10-20 ms of CPU, each key's text rendered)."""
        for widget in keyset.members:
            if isinstance(widget, FooterKey):
                with suppress(KeyError):  # not styled yet: measured when first shown
                    _width(widget)

    def draw_ahead(self, keyset: KeySet, draw: Callable[[Widget, Size], bool]) -> bool:
        """Fit the set, hidden and built ahead, to the footer's width and ``draw`` it (unseen.py: laid out and drawn
        out of sight): a set's first showing drew each of its ~10 keys on its view key's path (17 widgets rendered
        against a later press's 7), later ones only show them. A set not measured yet, or shown meanwhile, is left
        for its first showing. Whether it was drawn."""
        width = self.size.width or self.app.size.width
        shown = self._sets.get(self._shown) if self._shown is not None else None
        if keyset is shown or keyset.display or not keyset.is_mounted or not self._fit_keys(keyset, width):
            return False
        return draw(keyset, Size(width, 1))

    def _on_resize(self, event: Resize) -> None:
        if self._shown is not None and self._shown in self._sets:
            self._fit(self._sets[self._shown])

    def _fit(self, keyset: KeySet) -> None:
        """Show the keys of ``keyset`` that fit the footer's width whole, the others not at all; then the set."""
        if self._shown is None or keyset is not self._sets.get(self._shown):
            return  # another set shows now (a fit asked for after a refresh)
        if not self._fit_keys(keyset, self.size.width or self.app.size.width):
            self.call_after_refresh(self._fit, keyset)  # not styled yet (mounted as the app starts): once it is
            return
        self._set_display(keyset, True)

    def _fit_keys(self, keyset: KeySet, width: int) -> bool:
        """Show the keys of ``keyset`` that fit ``width`` whole, hide the others; False if a key is not styled yet."""
        widgets = keyset.members
        keys = [w for w in widgets if isinstance(w, FooterKey) and not w.has_class("-command-palette")]
        try:
            room = width - sum(_width(w) for w in widgets if w not in keys)
            out = set(left_out(keys, room))
        except KeyError:
            return False
        for widget in widgets:
            self._set_display(widget, widget not in out, layout=keyset.display)
        return True

    async def recompose(self) -> None:
        """Textual's way to redraw the keys: here, the set for the keys offered now."""
        await self.show_keys()


_TEXT_WIDTHS: WeakKeyDictionary[FooterKey, tuple[bool, int]] = WeakKeyDictionary()  # key -> (compact, width)


def _width(widget: Widget) -> int:
    """Columns ``widget`` takes in the footer: its text, padding, border and margin. A key's text is measured
    once per style (it is fixed when the key is built, its padding by compact; measuring renders it, ~0.3 ms a
    key at each view switch)."""
    styles = widget.styles
    text = 0
    if isinstance(widget, FooterKey):
        compact = widget.has_class("-compact")
        known = _TEXT_WIDTHS.get(widget)
        if known is None or known[0] != compact:
            known = _TEXT_WIDTHS[widget] = (compact, widget.get_content_width(Size(0, 0), Size(0, 0)))
        text = known[1]
    return text + styles.gutter.width + styles.margin.width


def left_out(keys: list[FooterKey], room: int) -> list[FooterKey]:
    """The keys to leave out so that the others fit ``room`` columns whole. Kept first: quit, then help,
    then the view's own keys from the first while they fit, then the views' keys (each has its letter in
    the help) likewise."""
    last = {action: rank for rank, action in enumerate(LAST_LEFT_OUT)}

    def kept_first(index: int) -> tuple[int, int]:
        action = keys[index].action
        return (last[action] if action in last else 3 if action.startswith("view(") else 2), index

    out, full = [], set()
    for index in sorted(range(len(keys)), key=kept_first):
        group = kept_first(index)[0]
        width = _width(keys[index])
        if group in full or width > room:
            full.add(group)  # the rest of its kind too: no gap in a row of keys
            out.append(keys[index])
        else:
            room -= width
    return out
