"""The footer shows whole keys only: at 80 columns Textual's cut the last one it had room for (`! Aler`, a
bare `!` with no label, `q qui`); the keys left out are the views' first, quit and help stay."""

from __future__ import annotations

import pytest
from textual.widgets._footer import FooterKey

from gpumon.tui.widgets.footer import KeySet, KeysFooter
from tests.conftest import make_app

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


@pytest.mark.parametrize("width", [80, 100, 120])
async def test_every_key_in_the_footer_is_whole_and_quit_and_help_stay(width: int) -> None:
    app = make_app(gpus=2)
    async with app.run_test(size=(width, 24)) as pilot:
        footer = app.query_one(KeysFooter)
        for key in VIEW_KEYS:
            await pilot.press(key)
            await pilot.pause(0.2)
            keys = shown(footer)
            palette = next(k for k in keys if k.has_class("-command-palette"))
            others = [k for k in keys if k is not palette]
            where = f"{width} columns, after {key!r}: " + " | ".join(f"{k.key_display} {k.description}" for k in others)
            for k in others:  # none runs under the palette's key or past the edge
                assert k.region.right <= palette.region.x, where
                assert k.region.width == k.get_content_width(k.region.size, k.region.size) + k.styles.gutter.width, (
                    where
                )
            actions = [k.action for k in others]
            assert "quit" in actions and "help" in actions, where
            assert actions.index("quit") < actions.index("help"), where


async def test_a_wider_terminal_shows_the_keys_left_out_again() -> None:
    app = make_app(gpus=2)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("r")
        await pilot.pause(0.2)
        footer = app.query_one(KeysFooter)
        narrow = {k.description for k in shown(footer)}
        assert "compare" not in narrow
        await pilot.resize_terminal(160, 24)
        await pilot.pause(0.3)
        wide = {k.description for k in shown(footer)}
        assert narrow < wide and "compare" in wide, (narrow, wide)
