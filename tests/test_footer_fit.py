"""The footer shows whole keys only: at 80 columns Textual's cut the last one it had room for (`! Aler`, a
bare `!` with no label, `q qui`); the keys left out are the views' first, quit and help stay."""

from __future__ import annotations

import contextlib

import pytest

from gpumon.tui.textual_private.footer import FooterKey
from gpumon.tui.widgets.footer import KeySet, KeysFooter
from tests.conftest import make_app, pilot_until

VIEW_KEYS = ["g", "r", "t", "d", "h", "exclamation_mark"]


def shown(footer: KeysFooter) -> list[FooterKey]:
    return [
        k
        for k in footer.query(FooterKey)
        if k.display
        and isinstance(k.parent, KeySet)
        and k.parent.display
        and k.parent.parent is footer
        and k.region.width
    ]


def misfits(footer: KeysFooter) -> list[str]:
    """What is wrong with the keys the footer shows: a key under the palette's or past the edge, a key cut,
    quit or help missing or out of order; [] once the footer is laid out whole."""
    keys = shown(footer)
    palette = next((k for k in keys if k.has_class("-command-palette")), None)
    if palette is None:
        return ["no palette key shown"]
    others = [k for k in keys if k is not palette]
    wrong = [
        f"{k.key_display} {k.description} runs under the palette" for k in others if k.region.right > palette.region.x
    ]
    wrong += [
        f"{k.key_display} {k.description} cut"
        for k in others
        if k.region.width != k.get_content_width(k.region.size, k.region.size) + k.styles.gutter.width
    ]
    actions = [k.action for k in others]
    if not ("quit" in actions and "help" in actions and actions.index("quit") < actions.index("help")):
        wrong.append("quit then help not both shown")
    return wrong


@pytest.mark.parametrize("width", [80, 100, 120])
async def test_every_key_in_the_footer_is_whole_and_quit_and_help_stay(width: int) -> None:
    app = make_app(gpus=2)
    async with app.run_test(size=(width, 24)) as pilot:
        footer = app.query_one(KeysFooter)
        for key in VIEW_KEYS:
            await pilot.press(key)
            # the regions read are the last layout's: beside CPU hogs the view's footer was not laid out yet
            # after a fixed 0.2 s (a key hidden by the fit still took its room: one column over, CI once)
            with contextlib.suppress(AssertionError):  # said below, with what is wrong
                await pilot_until(pilot, lambda: not misfits(footer), timeout=30)
            where = f"{width} columns, after {key!r}: " + " | ".join(
                f"{k.key_display} {k.description}" for k in shown(footer)
            )
            assert not misfits(footer), f"{where}: {misfits(footer)}"


async def test_a_wider_terminal_shows_the_keys_left_out_again() -> None:
    app = make_app(gpus=2)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("r")
        footer = app.query_one(KeysFooter)
        await pilot_until(pilot, lambda: not misfits(footer), "never laid out whole", timeout=30)
        narrow = {k.description for k in shown(footer)}
        assert "compare" not in narrow
        await pilot.resize_terminal(160, 24)
        await pilot_until(pilot, lambda: "compare" in {k.description for k in shown(footer)}, "no key came back", 30)
        wide = {k.description for k in shown(footer)}
        assert narrow < wide and "compare" in wide, (narrow, wide)
