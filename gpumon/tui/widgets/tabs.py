"""The tab strip that names the views: the current one highlighted; a click switches."""

from __future__ import annotations

from rich.text import Text
from textual.events import Click
from textual.geometry import Size
from textual.widget import Widget


class ViewTabs(Widget):
    """One line of tabs: the current view highlighted; a click switches."""

    DEFAULT_CSS = "ViewTabs { width: auto; height: 1; }"

    def __init__(self, views: list[tuple[str, str]], current: str, id: str | None = None) -> None:
        super().__init__(id=id)
        self.views = views  # (name, title) in tab order
        self.current = current
        self._spans: list[tuple[int, int, str]] = []

    def set_current(self, name: str) -> None:
        if name != self.current:
            self.current = name
            self.refresh()

    def _text(self) -> Text:
        text = Text()
        self._spans = []
        for name, title in self.views:
            start = len(text)
            text.append(f" {title} ", style="bold reverse" if name == self.current else "dim")
            self._spans.append((start, len(text), name))  # no separator: the padding spaces read as one
        return text

    def get_content_width(self, container: Size, viewport: Size) -> int:
        return len(self._text())

    def render(self) -> Text:
        return self._text()

    async def on_click(self, event: Click) -> None:
        for start, end, name in self._spans:
            if start <= event.x < end:
                await self.app.run_action(f"view('{name}')")
