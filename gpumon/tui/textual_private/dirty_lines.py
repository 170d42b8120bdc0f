"""A frame that draws only the screen lines that changed, and asks only the widgets on them for those lines.

For a partial frame Textual takes the box around every changed region (an idle tick changes a line or three of each
panel and a process row: the box spans most of the screen), asks every widget that box touches for all its visible
lines (the containers under the panels, the footer, every panel line and table row, each cropped and filtered), then
writes only the changed lines. Here a widget is asked only for the lines of it between its first and its last
changed line, and a widget on no changed line is not asked: what is written is the same (the same widgets, front to
back, fill the same cuts of each written line), at a third of the compositor's work a tick.

This leans on Textual's private compositor (pinned for the tests only): where a user's newer Textual no longer fits,
it gives up once and the frame goes Textual's own way, never an error.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from textual.geometry import Region
from textual.screen import Screen
from textual.strip import Strip

if TYPE_CHECKING:
    from textual._compositor import ChopsUpdate, Compositor
else:
    try:
        from textual._compositor import ChopsUpdate, Compositor
    except ImportError:  # moved: no screen gets this compositor (draw_changed_lines), frames go Textual's way
        ChopsUpdate, Compositor = None, object


class DirtyLines(Compositor):
    """Textual's compositor, its partial frame drawn line by line (set on a screen by ``draw_changed_lines``)."""

    works = True  # False once Textual's private parts were found moved: its own way from then on
    asked = 0  # lines asked of widgets for partial frames (tests count them)

    def render_partial_update(self) -> ChopsUpdate | None:
        if not DirtyLines.works:
            return super().render_partial_update()
        regions = set(self._dirty_regions)
        self._dirty_regions.clear()  # as Textual's: a refresh while drawing is for the next frame
        try:
            return self._changed_lines(regions)
        except (AttributeError, TypeError, ValueError, IndexError, KeyError):  # Textual's internals moved
            DirtyLines.works = False
            self._dirty_regions.update(regions)
            return super().render_partial_update()

    def _changed_lines(self, regions: set[Region]) -> ChopsUpdate | None:
        """Textual's render_partial_update, with the widgets asked for their changed lines only."""
        if not regions:
            return None
        crop = Region.from_union(list(regions)).intersection(self.size.region)
        spans = list(self._regions_to_spans(regions))
        lines = {y for y, _, _ in spans}
        chops = self._line_chops(crop, lines)
        return ChopsUpdate(chops, spans, [cut_set[1:] for cut_set in self.cuts])

    def _line_chops(self, crop: Region, lines: set[int]) -> Sequence[Mapping[int, Strip]]:
        """Textual's _render_chops for the lines in ``lines``: each widget that overlaps ``crop`` (front to back, as
        _get_renders orders them) is asked for the rows from its first to its last line in ``lines``."""
        cuts = self.cuts
        fromkeys = cast(Callable[[list[int]], dict[int, Strip | None]], dict.fromkeys)
        chops = [fromkeys(cut_set[:-1]) for cut_set in cuts]
        overlaps, intersection = crop.overlaps, Region.intersection
        for widget, (region, clip) in self.visible_widgets.items():
            if not overlaps(clip):
                continue
            if clip.contains_region(region):
                shown = region
            else:  # as _get_renders: a widget clipped to nothing is not asked
                shown = intersection(region, clip)
                if not (shown.width and shown.height):
                    continue
            first_cut, last_cut = shown.column_span
            wanted: dict[int, list[int]] = {}  # changed line -> the widget's cuts on it
            for y in shown.line_range:
                if y in lines:
                    final = [cut for cut in cuts[y] if last_cut >= cut >= first_cut]
                    line = chops[y]
                    if any(line.get(cut) is None for cut in final[:-1]):  # a widget in front filled all: unseen
                        wanted[y] = final
            if not wanted:
                continue
            first, last = min(wanted), max(wanted)
            asked = Region(shown.x - region.x, first - region.y, shown.width, last - first + 1)
            DirtyLines.asked += asked.height
            strips = widget.render_lines(asked)
            for y, strip in zip(range(first, last + 1), strips, strict=False):
                final = wanted.get(y)  # type: ignore[assignment]
                if final is None:
                    continue
                line = chops[y]
                for cut, piece in zip(final, strip.divide([cut - shown.x for cut in final[1:]]), strict=False):
                    if line.get(cut) is None:  # front to back: the first to fill a cut wins
                        line[cut] = piece
        return cast(Sequence[Mapping[int, Strip]], chops)


def draw_changed_lines(screen: Screen[Any]) -> bool:
    """Give ``screen`` the compositor above (its state kept: the same object, its class swapped); whether it has
    it. A compositor that is not Textual's own plain one is left as it is."""
    compositor = getattr(screen, "_compositor", None)
    if type(compositor) is Compositor and DirtyLines.works:
        compositor.__class__ = DirtyLines
    return type(compositor) is DirtyLines
