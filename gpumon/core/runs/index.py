"""The index of ended runs: one SQLite row per run, so an ended run's files are read once, ever.

``<state dir>/index.sqlite3`` maps run id -> the row ``gpumon runs`` and the
Runs view show (spec, status, step, loss, memory, the doctor's verdicts). The
supervisor writes a run's row when the run ends; a reader that meets an ended
run with no row (an older run) reads its files once and writes the row. SQLite
(standard library) gives what files alone would not: several writers at once
(WAL, a busy timeout) and a writer killed mid-transaction leaves the previous
rows intact (the transaction rolls back). The index is a cache: deleting it
costs one read of every run, nothing else.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any

INDEX = "index.sqlite3"
SCHEMA = 1
BUSY_MS = 5000


class RunIndex:
    def __init__(self, root: Path) -> None:
        self.path = root / INDEX
        self._db: sqlite3.Connection | None = None

    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            db = sqlite3.connect(self.path, timeout=BUSY_MS / 1000, isolation_level=None, check_same_thread=False)
            db.execute(f"PRAGMA busy_timeout={BUSY_MS}")
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute(
                "CREATE TABLE IF NOT EXISTS runs (id TEXT PRIMARY KEY, created REAL, schema INTEGER, row TEXT NOT NULL)"
            )
            self.path.chmod(0o600)
            self._db = db
        return self._db

    def rows(self) -> dict[str, dict[str, Any]]:
        """Every indexed run: id -> its row (rows of another schema are left out: they get rebuilt)."""
        try:
            cursor = self._connect().execute("SELECT id, row FROM runs WHERE schema = ?", (SCHEMA,))
            out = {}
            for run_id, text in cursor:
                try:
                    out[run_id] = json.loads(text)
                except ValueError:
                    continue
            return out
        except sqlite3.Error:
            return {}  # an unreadable index: every run is read from its files instead

    def put(self, rows: Iterable[tuple[str, float, dict[str, Any]]]) -> None:
        """Add or replace rows (id, created, row) in one transaction: all of them or none."""
        data = [(run_id, created, SCHEMA, json.dumps(row, separators=(",", ":"))) for run_id, created, row in rows]
        if not data:
            return
        db = self._connect()
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany("INSERT OR REPLACE INTO runs (id, created, schema, row) VALUES (?, ?, ?, ?)", data)
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def remove(self, run_ids: Iterable[str]) -> None:
        ids = [(run_id,) for run_id in run_ids]
        if ids:
            self._connect().executemany("DELETE FROM runs WHERE id = ?", ids)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
