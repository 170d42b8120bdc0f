"""The help screen's text, generated from the bindings the app and the views declare, so the two never disagree."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from rich.markup import escape
from textual.binding import Binding, BindingType

_NAMES = {
    "question_mark": "?",
    "left_square_bracket": "[",
    "right_square_bracket": "]",
    "left": "←",
    "right": "→",
    "up": "↑",
    "down": "↓",
    "escape": "esc",
}


def key_label(keys: str) -> str:
    """'left,left_square_bracket' -> '← ['; 'R' -> 'R (shift+r)'; 'f2' -> 'F2'."""
    labels = []
    for key in keys.split(","):
        key = key.strip()
        label = _NAMES.get(key) or (key.upper() if key[:1] == "f" and key[1:].isdigit() else key)
        if len(key) == 1 and key.isupper():
            label = f"{key} (shift+{key.lower()})"
        labels.append(label)
    return " ".join(labels)


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


def help_text(
    sections: Iterable[tuple[str, str, Iterable[BindingType]]], keymap: Mapping[str, str], footnote: str
) -> str:
    """Console markup: one section per (title, note, bindings), keys left, what they do right."""
    lines = ["[b]gpumon keys[/b]"]
    for title, note, bindings in sections:
        lines.append("")
        lines.append(f"[b]{escape(title)}[/b]" + (f"  [dim]{escape(note)}[/dim]" if note else ""))
        for keys, what in _rows(bindings, keymap):
            lines.append(f"  {escape(keys):<22} {escape(what)}")
    lines.append("")
    lines.append(footnote)
    return "\n".join(lines)


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
