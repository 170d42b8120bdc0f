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

import contextlib
import json
import os
import sqlite3
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gpumon.core.safefs import open_regular, say_once, take_back

INDEX = "index.sqlite3"
SCHEMA = 1
BUSY_MS = 5000
NOTICES: list[str] = []  # indexes found unreadable and rebuilt in this process: the CLI says each once


def corrupt(err: sqlite3.Error) -> bool:
    """The file itself is bad (SQLITE_CORRUPT, SQLITE_NOTADB): only then is the index set aside. Every other
    DatabaseError (a lock, a full disk, ProgrammingError from a thread's misuse) leaves a whole index alone: a
    concurrent test once saw a whole index moved aside and its WAL deleted under the other readers."""
    return getattr(err, "sqlite_errorcode", 0) & 0xFF in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)


class RunIndex:
    def __init__(self, root: Path) -> None:
        self.path = root / INDEX
        self._db: sqlite3.Connection | None = None

    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            try:
                self._db = self._open()
            except sqlite3.DatabaseError as err:
                if not corrupt(err):  # locked by a writer, disk full, read-only, misuse: the file is fine
                    raise
                self._rebuild(err)  # not a database, malformed: a cache, so rebuilt
                self._db = self._open()
        return self._db

    def _open(self) -> sqlite3.Connection:
        self._take_back()
        self._own_mode()
        db = sqlite3.connect(self.path, timeout=BUSY_MS / 1000, isolation_level=None, check_same_thread=False)
        try:
            db.execute(f"PRAGMA busy_timeout={BUSY_MS}")
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute(
                "CREATE TABLE IF NOT EXISTS runs (id TEXT PRIMARY KEY, created REAL, schema INTEGER, row TEXT NOT NULL)"
            )
            db.execute("SELECT count(*) FROM runs").fetchone()
        except sqlite3.DatabaseError:
            db.close()
            raise
        return db

    def _own_mode(self) -> None:
        """The file is 0600 before SQLite opens it: its -wal and -shm take the database file's mode. An existing
        file is never opened here: closing any descriptor of it drops every POSIX lock this process holds on it,
        and another connection of this process (a second reader, a feed's thread) then looks gone to the other
        processes; the last of them deleted the -shm under it ("disk I/O error", rows lost)."""
        try:
            fd = open_regular(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
        except FileExistsError:  # lstat: _take_back has removed a link; the state dir (0700) is ours alone
            mode = os.lstat(self.path).st_mode
            if stat.S_ISREG(mode) and mode & 0o077:
                os.chmod(self.path, 0o600)
            return
        os.close(fd)  # a new file: nobody holds a lock on it yet

    def _take_back(self) -> None:
        """A link (or a FIFO) planted at the index or its -wal/-shm is removed, never followed: SQLite would
        write its pages into the link's target. Said once per process (stderr: the CLI's, a supervisor's log)."""
        for suffix in ("", "-wal", "-shm"):
            path = self.path.with_name(INDEX + suffix)
            what = take_back(path)
            if what is not None:
                say_once(f"{path} was {what}: not followed, removed (the run index is rebuilt from the runs)")

    def _rebuild(self, err: sqlite3.Error) -> None:
        """Set the unreadable index aside (``index.sqlite3.unreadable``) and start an empty one: readers fill
        it from the run directories as they would for runs older than the index. Said once, in one line."""
        self.close()
        with contextlib.suppress(OSError):
            os.replace(self.path, self.path.with_name(INDEX + ".unreadable"))
        for suffix in ("-wal", "-shm"):
            with contextlib.suppress(OSError):
                self.path.with_name(INDEX + suffix).unlink()
        NOTICES.append(f"the run index {self.path} was unreadable ({err}): rebuilt from the run directories")

    def rows(self) -> dict[str, dict[str, Any]]:
        """Every indexed run: id -> its row (rows of another schema are left out: they get rebuilt)."""
        for attempt in (0, 1):
            try:
                cursor = self._connect().execute("SELECT id, row FROM runs WHERE schema = ?", (SCHEMA,))
                out = {}
                for run_id, text in cursor:
                    try:
                        out[run_id] = json.loads(text)
                    except ValueError:
                        continue
                return out
            except sqlite3.DatabaseError as err:  # e.g. "database disk image is malformed" past the header
                if attempt == 0 and corrupt(err):
                    self._rebuild(err)
                    continue
            except sqlite3.Error:
                pass
            break
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
