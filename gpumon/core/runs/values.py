"""NaN and infinity are values: read back from the strings events carry, kept, counted, shown as such.

Events write a non-finite float as the string "nan", "inf" or "-inf" (JSON has no such numbers). The fold
reads them back (``metric_value``): a non-finite value replaces the metric's latest value, so a run that
went NaN shows nan, not its last finite loss; the loss curve keeps only finite points, and ``NonFinite``
remembers from which step and how often the loss was not finite (what the chart says). Readers write them
the same way again: the strings in JSON (``json_value``), the words in text (``number_text``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

_WORDS = {"nan": math.nan, "inf": math.inf, "+inf": math.inf, "-inf": -math.inf, "infinity": math.inf}


def metric_value(value: Any) -> float | None:
    """A metric's number: a JSON number, or one of the strings a non-finite float is written as."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        return _WORDS.get(value.strip().lower())
    return None


def json_value(value: Any) -> Any:
    """``value`` for JSON: a non-finite float as "nan", "inf" or "-inf" (docs/events.md)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def is_nonfinite(value: float | None) -> bool:
    return value is not None and not math.isfinite(value)


def number_text(value: float | None, spec: str = ".4f") -> str:
    """``value`` formatted, "nan"/"inf"/"-inf" when not finite, "" when unknown."""
    if value is None:
        return ""
    if not math.isfinite(value):
        return str(value)
    return format(value, spec)


@dataclass
class NonFinite:
    """The loss's non-finite values: how many, the first and the latest step that had one."""

    count: int = 0
    first: int | None = None
    last: int | None = None
    since: int | None = None  # the first step of the latest run of non-finite values (None: finite now)

    def add(self, step: int | None, value: float) -> None:
        """One loss value: a non-finite one is counted; a finite one ends the streak."""
        if math.isfinite(value):
            self.since = None
            return
        self.count += 1
        if step is not None:
            self.first = step if self.first is None else self.first
            self.since = step if self.since is None else self.since
            self.last = step

    def to_state(self) -> dict[str, Any] | None:
        if not self.count:
            return None
        return {"count": self.count, "first": self.first, "last": self.last, "since": self.since}

    @classmethod
    def from_state(cls, state: Any) -> NonFinite:
        if not isinstance(state, dict):
            return cls()
        try:
            steps = [None if state.get(k) is None else int(state[k]) for k in ("first", "last", "since")]
            return cls(int(state["count"]), *steps)
        except (KeyError, TypeError, ValueError):
            return cls()

    def words(self, latest: float | None) -> str:
        """ "loss is nan from step 3", or "loss was not finite 4 times (steps 3-9)"; "" when it never was."""
        if not self.count:
            return ""
        if is_nonfinite(latest):
            since = f" from step {self.since}" if self.since is not None else ""
            return f"loss is {latest}{since}"
        where = f" (steps {self.first}-{self.last})" if self.first is not None and self.last != self.first else ""
        where = where or (f" (step {self.first})" if self.first is not None else "")
        return f"loss was not finite {self.count} time{'s' if self.count != 1 else ''}{where}"
