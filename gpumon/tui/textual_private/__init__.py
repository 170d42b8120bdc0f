"""The only modules of gpumon that reach Textual's private parts, one per concern.

Textual's private names are no promise: a release may rename or remove any of them. Each module here uses them
where a benchmark showed they pay (docs/benchmarks.md) or where Textual has no public word for a state gpumon must
read, and falls back to Textual's public behaviour (slower, never wrong) once one is found missing: the app never
fails for it. tests/test_textual_private.py names every private relied on and checks its shape on the installed
Textual; tests/test_architecture.py checks that no module outside this package reaches one. pyproject.toml pins
Textual to the releases those tests ran on.

- repaint.py      a sample's repaints put straight on the screen's dirty set, one wake-up
- dirty_lines.py  a frame asks only the widgets on its changed lines, for those lines
- offscreen.py    hidden views, help and form laid out and drawn out of sight after the start
- table.py        a DataTable whose changed cell redraws that cell and its row only (with row_draw.py)
- kept_style.py   a widget's rich_style and background colours kept until a style above changes
- escape.py       the terminal driver whose Escape acts after 25 ms and whose input loop sleeps at rest
- select.py       a Select that survives its first mount on a loaded machine
- footer.py       the footer's keys, its bindings' readiness, a display change that asks no second layout
- nodes.py        the app stopping, a screen mounted ahead, a widget taken down, a key's propagation, a node's keys
"""
