"""Plain-text formatting shared by the CLI and the TUI."""

from __future__ import annotations

import math

NA = "N/A"
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def size(n: float | None) -> str:
    if n is None:
        return NA
    value = float(n)
    for unit in _UNITS:
        if abs(value) < 1024 or unit == _UNITS[-1]:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def gib_pair(used: int | None, total: int | None) -> str:
    if used is None or total is None:
        return f"{size(used)} / {size(total)}"
    return f"{used / 1024**3:.1f}/{total / 1024**3:.1f} GiB"


def num(value: float | None, unit: str = "", digits: int = 0) -> str:
    if value is None:
        return NA
    return f"{value:.{digits}f}{unit}"


def percent(value: float | None) -> str:
    return NA if value is None else f"{value:.0f}%"


def elide(text: str | None, width: int) -> str:
    if text is None:
        return NA
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def duration(seconds: float | None) -> str:
    """'42s', '3m05s', '2h07m', '3d04h'."""
    if seconds is None:
        return NA
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def value(item: object) -> str:
    """A trial's config or metric value: floats to 4 significant digits, nothing as ''."""
    if item is None:
        return ""
    if isinstance(item, float):
        return f"{item:.4g}"
    return str(item)


def loss(item: float | None) -> str:
    """A loss, everywhere it is shown (CLI, app, doctor, alerts): 3 significant digits, its zeros kept
    ("2.30", "0.0123", "2.32e-06", "1.23e+03"), nan/inf/-inf as such, "" when unknown. A zero is "0.00":
    torch's -0.0 (a cross-entropy over one class is -(target * 0)) is no negative loss."""
    if item is None:
        return ""
    if not math.isfinite(item):
        return str(item)
    text = f"{item + 0.0:#.3g}"  # -0.0 + 0.0 is 0.0; every other value is itself
    return text[:-1] if text.endswith(".") else text


def loss_fit(item: float | None, width: int) -> str:
    """``loss`` in at most ``width`` characters: fewer significant digits where its 3 do not fit ("-1.2e-100"),
    so that a column of losses keeps one width whatever the values."""
    text = loss(item)
    for digits in (2, 1):
        if len(text) <= width or item is None or not math.isfinite(item):
            break
        text = f"{item + 0.0:.{digits}g}"
    return text


_SCALES = ((1e3, "k"), (1e6, "M"), (1e9, "G"), (1e12, "T"))


def count_fit(value: float, width: int) -> str:
    """A count (a step, samples a second) in at most ``width`` characters: whole where it fits ("1234567"), else
    in thousands, millions... (at most 3 digits before the point) with the decimals that fit, cut, never rounded
    up ("1.99M": a step not reached is never shown). Longer than ``width`` only past 999T."""
    text = f"{value:.0f}"
    if len(text) <= width:
        return text
    scale, suffix = next(((s, x) for s, x in _SCALES if abs(value) / s < 1000), _SCALES[-1])
    for decimals in (2, 1, 0):
        cut = math.floor(abs(value) / scale * 10**decimals) / 10**decimals
        text = f"{'-' if value < 0 else ''}{cut:.{decimals}f}{suffix}"
        if len(text) <= width:
            break
    return text
