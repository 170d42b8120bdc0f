"""The help screen's text, generated from the bindings the app and the views declare, so the two never disagree."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.text import Text
from textual.binding import Binding, BindingType
from textual.keys import format_key

#: One section of the help: title, note, then (keys, what they do) rows.
HelpSection = tuple[str, str, list[tuple[str, str]]]

# Words where Textual's own label is a glyph that reads less well in a list of keys.
_WORDS = {"enter": "enter", "backspace": "backspace", "escape": "esc"}


def _one_key(key: str) -> str:
    """A Textual key name as typed: 'slash' -> '/', 'less_than_sign' -> '<', 'f1' -> 'F1', 'ctrl+slash' -> 'ctrl+/'."""
    if len(key) == 1 and key.isupper():
        return f"{key} (shift+{key.lower()})"
    modifiers, _, name = key.rpartition("+")
    if not name:  # "ctrl++": the key is "+" itself
        modifiers, name = modifiers.rstrip("+"), "+"
    function_key = name[:1] == "f" and name[1:].isdigit()
    label = name.upper() if function_key else _WORDS.get(name) or format_key(name)
    return f"{modifiers}+{label}" if modifiers else label


def key_label(keys: str) -> str:
    """'left,left_square_bracket' -> '← ['; 'R' -> 'R (shift+r)'; 'f2' -> 'F2'; 'slash' -> '/'."""
    return " ".join(_one_key(key.strip()) for key in keys.split(","))


def bound_keys(binding: Binding, keymap: Mapping[str, str]) -> str:
    """The binding's keys as the user's keymap sets them ("x,ctrl+t"), else its own."""
    return keymap.get(binding.id or "", binding.key)


def _rows(bindings: Iterable[BindingType], keymap: Mapping[str, str]) -> list[tuple[str, str]]:
    """(keys, what) per binding; bindings with the same text share a row (0-9 for the digits)."""
    rows: list[tuple[list[str], str]] = []
    for binding in bindings:
        if not isinstance(binding, Binding):
            continue
        keys = bound_keys(binding, keymap)
        what = binding.tooltip or binding.description
        if rows and rows[-1][1] == what:
            rows[-1][0].append(keys)
        else:
            rows.append(([keys], what))
    out = []
    for group, what in rows:
        if len(group) > 2 and all(k.isdigit() for k in group):
            out.append((f"{group[0]}-{group[-1]}", what))
        else:
            out.append((" / ".join(key_label(k) for k in group), what))
    return out


def help_rows(
    sections: Iterable[tuple[str, str, Iterable[BindingType]]], keymap: Mapping[str, str]
) -> list[HelpSection]:
    """Each (title, note, bindings) section as (title, note, rows), the keys as the user's keymap sets them."""
    return [(title, note, _rows(bindings, keymap)) for title, note, bindings in sections]


def plain_help(rows: list[HelpSection], footnote: str) -> str:
    """The help as plain lines: a title line per section, then '  keys  what' per row."""
    lines = ["gpumon keys"]
    for title, note, section in rows:
        lines.append("")
        lines.append(title + (f"  {note}" if note else ""))
        lines.extend(f"  {keys:<22} {what}" for keys, what in section)
    lines.append("")
    lines.append(footnote)
    return "\n".join(lines)


def help_text(
    sections: Iterable[tuple[str, str, Iterable[BindingType]]], keymap: Mapping[str, str], footnote: str
) -> str:
    """The help as plain lines, from the bindings (see plain_help)."""
    return plain_help(help_rows(sections, keymap), footnote)


def help_renderable(rows: list[HelpSection], footnote: str) -> HelpLines:
    """The help as the screen shows it: literal text (a note may hold brackets), keys left, what they do
    right, a long line wrapped on words under its own column."""
    return HelpLines(rows, footnote)


WIDTHS_KEPT = 4  # the help's lines kept for so many widths (with and without its scrollbar, a resize)


class HelpLines:
    """The help's lines as a grid of two columns per section would draw them (rich's Table.grid, padding 1 between,
    the second column as wide as its longest text, wrapped on words to what is left), made of Text lines only: a
    Table of each section measured and drawn each time the help was laid out cost ~60 ms of CPU (4 layouts or
    draws at rest), on the first key's path when the layout ahead was under way. Kept per width."""

    def __init__(self, rows: list[HelpSection], footnote: str) -> None:
        self.rows = rows
        self.footnote = footnote
        self.keys_width = min(24, max([10, *(len(keys) for _, _, section in rows for keys, _ in section)])) + 3
        self._lines: dict[int, list[Text]] = {}

    def lines(self, console: Console, width: int) -> list[Text]:
        if width not in self._lines:
            self._lines = dict(list({width: self._build(console, width), **self._lines}.items())[:WIDTHS_KEPT])
        return self._lines[width]

    def _build(self, console: Console, width: int) -> list[Text]:
        lines = [Text("gpumon keys", style="bold")]
        for title, note, section in self.rows:
            head = Text(title, style="bold")
            if note:
                head.append(f"  {note}", style="dim")
            lines += [Text(), *head.wrap(console, width)]
            left = min(self.keys_width, width)
            what_width = min(max(cell_len(what) for _, what in section), max(1, width - left - 1)) if section else 0
            for keys, what in section:
                keys_lines = Text(f"  {keys}", style="bold").wrap(console, left)
                what_lines = Text(what).wrap(console, what_width)
                for i in range(max(len(keys_lines), len(what_lines))):
                    keys_line = keys_lines[i] if i < len(keys_lines) else Text()
                    keys_line.pad_right(left - keys_line.cell_len)  # spaces in the keys' style, as the grid's cell
                    line = Text()  # the keys' style on their cells only
                    line.append_text(keys_line)
                    if i < len(what_lines):
                        line.append(" ")
                        line.append_text(what_lines[i])
                        line.pad_right(left + 1 + what_width - line.cell_len)  # as the grid's column, to its width
                    lines.append(line)
        lines += [Text(), *Text(self.footnote, style="dim").wrap(console, width)]
        for line in lines:  # each fits its width: drawn as it is
            line.no_wrap, line.overflow, line.end = True, "ignore", "\n"
        return lines

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from self.lines(console, options.max_width)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        widest = max(cell_len(line.plain) for line in self.lines(console, options.max_width))
        return Measurement(widest, widest)


def clashes(sections: Iterable[tuple[str, str, Iterable[BindingType]]], keymap: Mapping[str, str]) -> list[str]:
    """What the keymap breaks: one key for two actions in the same view, or a view key hiding a global key.

    The first section holds the global keys; each other one is a view (its keys act with the global ones).
    """
    scopes = [(title, [b for b in bindings if isinstance(b, Binding)]) for title, _, bindings in sections]
    if not scopes:
        return []

    def owners(bindings: list[Binding]) -> dict[str, Binding]:
        return {key.strip(): binding for binding in bindings for key in bound_keys(binding, keymap).split(",")}

    problems = []
    global_title, global_bindings = scopes[0]
    for title, bindings in scopes:
        seen: dict[str, Binding] = {} if title == global_title else owners(global_bindings)
        for binding in bindings:
            for key in bound_keys(binding, keymap).split(","):
                other = seen.setdefault(key.strip(), binding)
                if other.action != binding.action and (binding.id in keymap or other.id in keymap):
                    where = "everywhere" if other in global_bindings else f"in the {title} view"
                    moved = binding if binding.id in keymap else other
                    kept = other if moved is binding else binding
                    problems.append(f"{moved.id} = {key.strip()!r} is already {kept.id!r} {where}: pick another key")
    return problems
