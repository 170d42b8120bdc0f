"""DataTable's row and cell caches with their keys indexed by row.

A changed cell drops its row's entries from both caches. Found by a walk of every key, that cost each changed
row ~0.15 ms in a table of 64 processes and grew with the cache (40 ms a sample for 256 processes, every one of
them with a moved SM%). Indexed by the key's first part (the row key, in DataTable's keys for both caches), a
row's entries go without looking at the others'.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from textual.cache import LRUCache


class RowCache(LRUCache[Any, Any]):
    def __init__(self, maxsize: int) -> None:
        super().__init__(maxsize)
        self._by_row: dict[Hashable, set[Any]] = {}

    def set(self, key: Any, value: Any) -> None:
        super().set(key, value)
        self._by_row.setdefault(key[0], set()).add(key)  # a key the cache let go since stays: dropping it is a no-op

    __setitem__ = set

    def clear(self) -> None:
        super().clear()
        self._by_row.clear()

    def drop_row(self, row_key: Hashable, match: Callable[[Any], bool] | None = None) -> None:
        """Drop the row's entries (those ``match`` accepts)."""
        keys = self._by_row.get(row_key)
        if not keys:
            return
        for key in [k for k in keys if match is None or match(k)]:
            self.discard(key)
            keys.discard(key)
        if not keys:
            del self._by_row[row_key]
