"""Control characters shown as `less` shows them (core/visible.py)."""

from __future__ import annotations

from gpumon.core.visible import visible, visible_log


def test_every_control_character_is_shown_as_text() -> None:
    assert visible("a\x1b[2Jb\x07c\nd\te\x7ff\x00") == "a^[[2Jb^Gc^Jd^Ie^?f^@"
    assert visible("x\x9by\u202ez\u2066w\u200fv") == "x<U+009B>y<U+202E>z<U+2066>w<U+200F>v"
    assert visible("naïve 训练 🧑‍🔬") == "naïve 训练 🧑‍🔬"  # printable text, an emoji's joiner: as it is


def test_a_log_line_keeps_tabs_newlines_and_colours_only_where_asked() -> None:
    line = "\x1b]0;t\x07\x1b[31mred\x1b[0m\tx\x1b[1;32m\ny\x1b[K"
    # the title shown, never set; erase-in-line (a bar's own layout) dropped
    assert visible_log(line, colour=True) == "^[]0;t^G\x1b[31mred\x1b[0m\tx\x1b[1;32m\ny"
    assert visible_log(line, colour=False) == "^[]0;t^Gred\tx\ny"
    assert visible_log("plain\tline", colour=False) == "plain\tline"


def test_tqdms_nested_bars_show_as_their_text_without_cursor_moves() -> None:
    """A Lightning validation bar (tqdm, position 1) ends each frame with ESC [A: a log shows the bar, not ^[[A."""
    import io

    from tqdm import tqdm

    out = io.StringIO()
    for _ in tqdm(range(3), file=out, desc="Epoch 0", position=0, ascii=True):
        for _ in tqdm(range(2), file=out, desc="Validation", position=1, leave=False, ascii=True):
            pass
    raw = out.getvalue()
    assert "\x1b[A" in raw  # the real library moves the cursor
    for line in raw.replace("\r", "\n").splitlines():
        shown = visible_log(line, colour=False)
        assert "^[" not in shown, shown
    assert "Validation" in visible_log(raw, colour=False)
