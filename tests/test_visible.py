"""Control characters shown as `less` shows them (core/visible.py)."""

from __future__ import annotations

from gpumon.core.visible import visible, visible_log


def test_every_control_character_is_shown_as_text() -> None:
    assert visible("a\x1b[2Jb\x07c\nd\te\x7ff\x00") == "a^[[2Jb^Gc^Jd^Ie^?f^@"
    assert visible("x\x9by\u202ez\u2066w\u200fv") == "x<U+009B>y<U+202E>z<U+2066>w<U+200F>v"
    assert visible("naïve 训练 🧑‍🔬") == "naïve 训练 🧑‍🔬"  # printable text, an emoji's joiner: as it is


def test_a_log_line_keeps_tabs_newlines_and_colours_only_where_asked() -> None:
    line = "\x1b]0;t\x07\x1b[31mred\x1b[0m\tx\x1b[1;32m\ny\x1b[K"
    assert visible_log(line, colour=True) == "^[]0;t^G\x1b[31mred\x1b[0m\tx\x1b[1;32m\ny^[[K"
    assert visible_log(line, colour=False) == "^[]0;t^Gred\tx\ny^[[K"
    assert visible_log("plain\tline", colour=False) == "plain\tline"
