"""Text that is not ours (names, paths, commands, messages) shown as it reads, never parsed as markup.

Textual reads a plain ``str`` as markup in a Static, a toast, a DataTable cell or column label and a
border title: ``pip install -e '.[train]'`` would lose its ``[train]``, and ``[/]`` raises. Rich
``Text`` and Textual ``Content`` are literal; toasts take ``markup=False``; border titles go through
``set_title`` below.
"""

from __future__ import annotations

from textual.content import Content
from textual.markup import escape
from textual.widget import Widget


def set_title(widget: Widget, text: str, *, subtitle: bool = False) -> None:
    """Set ``widget``'s border title (or subtitle) to ``text`` as it reads; only a change repaints."""
    name = "border_subtitle" if subtitle else "border_title"
    if getattr(widget, name) != escape(text):  # the getter gives markup (escape: 5 us, a Content: 35 us)
        setattr(widget, name, Content(text))
