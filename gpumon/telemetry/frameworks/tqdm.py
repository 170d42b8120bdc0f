"""tqdm: numbers in postfixes (``set_postfix(loss=...)``, ``set_postfix_str("loss=0.3")``) and the total.

The total follows the outermost open bar (the oldest bar not closed yet; a bar that ended, such as a
preprocessing bar, no longer counts). A bar opened inside it counts as its inner loop when it opened
before the outer bar advanced, or when it has the total of an inner bar that already ran to its end under
it (the batch bar of an epoch bar, made again each epoch); then the total is outer x inner and the
progress ``outer.n x inner.total + inner.n``. Any other inner bar (an evaluation bar opened mid-run) is
left out. Bars are read when tqdm itself redraws them (at most every ``mininterval``). The position is the bar's
own ``n`` (its ``initial`` included: a resumed run's bar starts there), in the bar's own unit; a bar over a
DataLoader counts one epoch, and says so (``per_epoch``), so its total is never taken for the run's.
"""

from __future__ import annotations

import functools
import re
import sys
import weakref
from types import ModuleType
from typing import Any

from gpumon.telemetry.frameworks.report import LazyNumber, Reporter, guarded, numbers

SOURCE = "tqdm"
PAIR = re.compile(r"([A-Za-z_][\w./-]*)\s*[=:]\s*([-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf))")


class Bars:
    """The open bars, oldest first, and which inner bar is the outer bar's loop."""

    def __init__(self, reporter: Reporter) -> None:
        self.reporter = reporter
        self.open: list[weakref.ref[Any]] = []
        self.loop_total: dict[int, int] = {}  # id(outer) -> total of its inner loop bar
        self.looping: set[int] = set()  # ids of bars recognised as an outer bar's inner loop

    def opened(self, bar: Any) -> None:
        self.open.append(weakref.ref(bar))
        outer = self.outer()
        total = _total(bar)
        if outer is None or outer is bar or total is None:
            return
        if getattr(outer, "n", 0) == 0 or self.loop_total.get(id(outer)) == total:
            self.loop_total[id(outer)] = total
            self.looping.add(id(bar))
        self.report(force=True)

    def closed(self, bar: Any) -> None:
        self.looping.discard(id(bar))
        is_outer = self.outer() is bar
        self.open = [ref for ref in self.open if ref() is not None and ref() is not bar]
        if is_outer:
            self.report(force=True, bar=bar)
            self.loop_total.pop(id(bar), None)

    def outer(self) -> Any:
        for ref in self.open:
            bar = ref()
            if bar is not None and _total(bar) is not None:
                return bar
        return None

    def report(self, force: bool = False, bar: Any = None) -> None:
        outer = bar if bar is not None else self.outer()
        if outer is None:
            return
        total, done = _total(outer), int(getattr(outer, "n", 0))
        loop = self.loop_total.get(id(outer))
        if total is None:
            return
        if loop:
            inner = next((b for b in (r() for r in self.open) if b is not None and id(b) in self.looping), None)
            total, done = total * loop, done * loop + (int(getattr(inner, "n", 0)) if inner is not None else 0)
        self.reporter.progress(total, done, force=force, per_epoch=not loop and _over_loader(outer))


def _over_loader(bar: Any) -> bool:
    """A bar over a torch DataLoader counts one epoch's batches: the run's epochs are not in its total."""
    data = sys.modules.get("torch.utils.data")  # the script's own import: never imported here
    loader = getattr(data, "DataLoader", None)
    return isinstance(loader, type) and isinstance(getattr(bar, "iterable", None), loader)


def _total(bar: Any) -> int | None:
    total = getattr(bar, "total", None)
    return int(total) if isinstance(total, int | float) and total > 0 and total != float("inf") else None


def hook(module: ModuleType) -> None:
    cls = getattr(module, "tqdm", None)
    if cls is None or getattr(cls.__init__, "_gpumon", False):
        return
    reporter, reader = Reporter(SOURCE), LazyNumber()
    bars = Bars(reporter)
    _wrap(cls, "__init__", lambda bar, *a, **k: None if bar.disable else bars.opened(bar))
    _wrap(cls, "refresh", lambda bar, *a, **k: bars.report())
    _wrap(cls, "reset", lambda bar, *a, **k: bars.report(force=True))
    _wrap(cls, "close", lambda bar, *a, **k: bars.closed(bar), before=True)

    def postfix(bar: Any, ordered_dict: Any = None, refresh: bool = True, **kwargs: Any) -> None:
        values = dict(ordered_dict or {})
        values.update(kwargs)
        reporter.metrics(numbers(values, reader))

    def postfix_str(bar: Any, s: Any = "", refresh: bool = True) -> None:
        reporter.metrics({name: float(value) for name, value in PAIR.findall(str(s))})

    _wrap(cls, "set_postfix", postfix, before=True, quiet="set_postfix_str")
    _wrap(cls, "set_postfix_str", postfix_str, before=True)


def _wrap(cls: type, name: str, ours: Any, before: bool = False, quiet: str | None = None) -> None:
    """``cls.name`` calls ``ours`` (guarded) after (or ``before``) the original. ``quiet``: a method
    the original calls that must not report again (set_postfix formats into set_postfix_str)."""
    original = getattr(cls, name)
    safe = guarded(SOURCE, ours)

    @functools.wraps(original)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(self, "_gpumon_quiet", None) == name:
            return original(self, *args, **kwargs)
        if before:
            safe(self, *args, **kwargs)
        if quiet is None:
            result = original(self, *args, **kwargs)
        else:
            self._gpumon_quiet = quiet
            try:
                result = original(self, *args, **kwargs)
            finally:
                self._gpumon_quiet = None
        if not before:
            safe(self, *args, **kwargs)
        return result

    method._gpumon = True  # type: ignore[attr-defined]
    setattr(cls, name, method)
