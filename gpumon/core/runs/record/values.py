"""NaN and infinity are values: read back from the strings events carry, kept, counted, shown as such.

Events write a non-finite float as the string "nan", "inf" or "-inf" (JSON has no such numbers). The fold
reads them back (``metric_value``): a non-finite value replaces the metric's latest value, so a run that
went NaN shows nan, not its last finite loss; the loss curve keeps only finite points, and ``NonFinite``
remembers from which step and how often the loss was not finite (what the chart says). Readers write them
the same way again: the strings in JSON (``json_value``), the words in text (``core/format.py`` ``loss``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
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


def event_number(value: Any) -> float | None:
    """A field the telemetry wrote as a number (a time, seconds, a count): an int or a float, never a bool, never a
    string (unlike a metric's value, nothing here is written as "nan")."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def json_value(value: Any) -> Any:
    """``value`` for JSON: a non-finite float as "nan", "inf" or "-inf" (docs/events.md)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def is_nonfinite(value: float | None) -> bool:
    return value is not None and not math.isfinite(value)


@dataclass
class NonFinite:
    """The loss's non-finite values: how many, where, and which (inf first, then NaN is what an overflow does).

    ``before`` is the step of the finite value read just before the latest run of non-finite values began:
    a step recorder that reads the loss at most so many times a second may not have read the steps between
    (``words`` says so, rather than dating the first bad value to the step it was first read at)."""

    count: int = 0
    first: int | None = None
    last: int | None = None
    since: int | None = None  # the first step of the latest run of non-finite values (None: finite now)
    first_word: str = ""  # "inf", "-inf" or "nan": the first non-finite value
    since_word: str = ""  # the value at ``since``
    word: str = ""  # the latest non-finite value
    word_since: int | None = None  # the first step of ``word`` in the latest run
    finite_at: int | None = None  # the step of the latest finite value
    before: int | None = None  # ``finite_at`` when the latest run began
    seen: list[str] = field(default_factory=list)  # the non-finite values met, in order

    def add(self, step: int | None, value: float) -> None:
        """One loss value: a non-finite one is counted; a finite one ends the streak."""
        if math.isfinite(value):
            self.since = self.word_since = None
            self.word = ""
            if step is not None:
                self.finite_at = step
            return
        word = str(value)
        self.count += 1
        self.first_word = self.first_word or word
        if word not in self.seen:
            self.seen.append(word)
        if step is None:
            self.word = word
            return
        self.first = step if self.first is None else self.first
        if self.since is None:  # a run of non-finite values begins
            self.since, self.since_word, self.before = step, word, self.finite_at
        if word != self.word or self.word_since is None:
            self.word, self.word_since = word, step
        self.last = step

    def to_state(self) -> dict[str, Any] | None:
        if not self.count:
            return {"finite_at": self.finite_at} if self.finite_at is not None else None
        return {
            "count": self.count, "first": self.first, "last": self.last, "since": self.since,
            "first_word": self.first_word, "since_word": self.since_word, "word": self.word,
            "word_since": self.word_since, "finite_at": self.finite_at, "before": self.before, "seen": self.seen,
        }  # fmt: skip

    @classmethod
    def from_state(cls, state: Any) -> NonFinite:
        if not isinstance(state, dict):
            return cls()
        try:
            found = cls(int(state.get("count") or 0))
            for key in _STEPS:
                setattr(found, key, None if state.get(key) is None else int(state[key]))
            for key in ("first_word", "since_word", "word"):
                setattr(found, key, str(state.get(key) or ""))
            found.seen = [str(w) for w in state.get("seen") or () if str(w) in _WORDS]
            return found
        except (TypeError, ValueError):
            return cls()

    def words(self, latest: float | None, rank: int | None = None) -> str:
        """What the loss did, in words: "loss is nan from step 3", "loss turned inf at step 3, nan from step 5",
        "loss was nan 2 times (steps 3-4)"; "" when it was always finite. ``rank``: " on rank N" is said too."""
        if not self.count:
            return ""
        on = f" on rank {rank}" if rank is not None else ""
        if not is_nonfinite(latest):
            names = " or ".join(self.seen) or "not finite"
            where = f" (steps {self.first}-{self.last})" if self.first is not None and self.last != self.first else ""
            where = where or (f" (step {self.first})" if self.first is not None else "")
            return f"loss was {names} {self.count} time{'s' if self.count != 1 else ''}{where}{on}"
        now = str(latest)
        if self.since is None:  # values without a step
            return f"loss is {now}{on}"
        if self.since_word and self.since_word != now and self.word_since is not None and self.word_since > self.since:
            text = f"loss turned {self.since_word} at step {self.since}, {now} from step {self.word_since}{on}"
        else:
            text = f"loss is {now} from step {self.since}{on}"
        notes = []
        if self.before is not None and self.since - self.before > 1:  # the steps between were not read
            gap = (self.before + 1, self.since - 1)
            unread = f"step {gap[0]}" if gap[0] == gap[1] else f"steps {gap[0]}-{gap[1]}"
            notes.append(f"finite at step {self.before}; {unread} not read")
        if self.first is not None and self.first != self.since:
            notes.append(f"not finite earlier too, first at step {self.first}")
        return text + (f" ({'; '.join(notes)})" if notes else "")


_STEPS = ("first", "last", "since", "word_since", "finite_at", "before")
