"""Run a callback right after the script's own import of a named module.

One ``sys.meta_path`` finder serves every watched name; it answers only for those
names and lets the other finders find the module, so a module that is never
imported costs one dict look-up per import and we never import it ourselves.
A callback's failure is swallowed: it must never break the user's import.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import sys
import threading
import time
from collections.abc import Callable, Sequence
from types import ModuleType

Callback = Callable[[ModuleType], None]

_lock = threading.Lock()
_pending: dict[str, list[Callback]] = {}
_finder: _ImportWatcher | None = None
TOOK: dict[str, float] = {}  # a watched module -> seconds its own import took (the ledger's start-up: torch's)


def when_imported(name: str, callback: Callback) -> None:
    """Call ``callback(module)`` once ``name`` is imported: now if it already is, else right after its import."""
    module = sys.modules.get(name)
    if module is not None:
        _call(callback, module)
        return
    global _finder
    with _lock:
        _pending.setdefault(name, []).append(callback)
        if _finder is None or _finder not in sys.meta_path:
            _finder = _ImportWatcher()
            sys.meta_path.insert(0, _finder)


def _call(callback: Callback, module: ModuleType) -> None:
    with contextlib.suppress(Exception):  # a hook never breaks the script's import
        callback(module)


class _ImportWatcher(importlib.abc.MetaPathFinder):
    """Finds a watched module with the finders after it, and wraps its loader's ``exec_module``."""

    def __init__(self) -> None:
        self._busy = threading.local()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _pending or getattr(self._busy, "name", None) == fullname:
            return None
        self._busy.name = fullname
        try:
            spec = self._find_with_others(fullname, path, target)
        finally:
            self._busy.name = None
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        real_exec = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            began = time.monotonic()
            real_exec(module)
            TOOK[fullname] = time.monotonic() - began
            with _lock:
                callbacks = _pending.pop(fullname, [])
            for callback in callbacks:
                _call(callback, module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec

    def _find_with_others(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None
    ) -> importlib.machinery.ModuleSpec | None:
        for finder in list(sys.meta_path):
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                return spec
        return None
