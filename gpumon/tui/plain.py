"""Words that are not ours drawn as ``less`` shows them: a run's id and name, an exception, an alert, a log line
quoted by the doctor. Textual writes a string's ESC through to the terminal: a script's OSC 52 once set the
viewer's clipboard and ``ESC [2J`` cleared the screen, with no key pressed (issue 49).

``PlainToasts``: every toast (views call ``self.notify``, which is the app's). ``PlainText``: a ``rich.text.Text``
whose appended strings show their control characters as text (``^[``), line breaks kept; the doctor's report
is one.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text

from gpumon.core.visible import visible


def lines_visible(text: str) -> str:
    """``visible`` line by line: the newlines the text is laid out with stay, every other control is shown."""
    return (
        text
        if "\x1b" not in text and "\r" not in text and not _other(text)
        else "\n".join(visible(line) for line in text.split("\n"))
    )


def _other(text: str) -> bool:
    return any((ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F for c in text)


class PlainToasts:
    """Mixed into the app before Textual's ``App``."""

    def notify(self, message: str, *, title: str = "", **kwargs: Any) -> None:
        kwargs.pop("markup", None)  # never markup either: a run's words hold brackets
        super().notify(visible(message), title=visible(title), markup=False, **kwargs)  # type: ignore[misc]


class PlainText(Text):
    """A Text whose appended strings are shown, never obeyed."""

    def append(self, text: Any, style: Any = None) -> PlainText:
        if isinstance(text, str):
            text = lines_visible(text)
        super().append(text, style)
        return self
