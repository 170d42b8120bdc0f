"""The alerts of all runs read back from their attempts files: ``gpumon alerts`` and the app's Alerts view.

Bounded: one ``stat`` per live or lately ended run directory (each run directory every 30 s), looked into only
when its mtime moved; one per attempts file; at most ``RUNS`` files read (newest first), each from its last
256 KiB; a file unchanged since the last read (same size and mtime) is not read again.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpumon.core.alerts.delivery import read_records
from gpumon.core.safefs import read_bytes

RUNS = 200  # the attempts files read, newest first
LIMIT = 200  # the alerts kept, newest first
FULL_EVERY_S = 30.0  # every run directory is stat'ed this often; the hot ones at every read
HOT_S = 600.0  # a run directory that moved within this long is hot (a live run, one that just ended)
SEEN_FILE = "alerts-read"  # in the state dir: when the user last looked at the alerts (the unread count)


@dataclass(frozen=True)
class Attempt:
    channel: str
    tries: int
    ok: bool
    reason: str
    t: float
    final: bool


@dataclass(frozen=True)
class AlertEntry:
    id: str
    kind: str
    text: str
    t: float
    run: str | None  # None: an alert of no run (a fleet host, gpumon alerts test)
    state: str | None
    host: str
    channels: tuple[str, ...]  # the channels it was for (labels: a webhook's URL masked)
    held: str = ""  # not sent: the window's rule
    config_error: str = ""
    attempts: tuple[Attempt, ...] = ()

    def delivery(self) -> dict[str, str]:
        """Channel -> "sent", "trying: <reason>", "failed: <reason>" (its latest attempt)."""
        out: dict[str, str] = {c: "waiting" for c in self.channels}
        for a in sorted(self.attempts, key=lambda a: a.t):
            if a.ok:
                out[a.channel] = f"sent (try {a.tries})"
            else:
                out[a.channel] = f"{'failed' if a.final else 'trying'}: {a.reason} (try {a.tries})"
        return out

    def summary(self) -> str:
        """One word-ish line for a table: sent, failed, held, trying, not sent (no channel picks it)."""
        if self.held:
            return "held"
        if not self.channels:
            return "config error" if self.config_error else "not sent (no channel picks it)"
        states = self.delivery().values()
        if all(s.startswith("sent") for s in states):
            return "sent"
        if any(s.startswith("failed") for s in states):
            return "failed"
        return "trying"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "kind": self.kind, "text": self.text, "t": self.t, "run": self.run, "state": self.state,
            "host": self.host, "status": self.summary(), "held": self.held or None,
            "config_error": self.config_error or None, "channels": self.delivery(),
        }  # fmt: skip


def parse(records: list[dict[str, Any]]) -> list[AlertEntry]:
    """One file's records as alerts with their attempts."""
    alerts: dict[str, dict[str, Any]] = {}
    attempts: dict[str, list[Attempt]] = {}
    for doc in records:
        key = str(doc.get("id"))
        if doc.get("type") == "alert":
            alerts[key] = doc
        elif doc.get("type") == "attempt":
            attempts.setdefault(key, []).append(
                Attempt(str(doc.get("channel")), int(doc.get("try") or 0), bool(doc.get("ok")),
                        str(doc.get("reason") or ""), float(doc.get("t") or 0), bool(doc.get("final")))
            )  # fmt: skip
    return [
        AlertEntry(
            id=key,
            kind=str(doc.get("kind")),
            text=str(doc.get("text") or ""),
            t=float(doc.get("t") or 0),
            run=doc.get("run") if isinstance(doc.get("run"), str) else None,
            state=doc.get("state") if isinstance(doc.get("state"), str) else None,
            host=str(doc.get("host") or ""),
            channels=tuple(str(c) for c in doc.get("channels") or ()),
            held=str(doc.get("held") or ""),
            config_error=str(doc.get("config_error") or ""),
            attempts=tuple(attempts.get(key, ())),
        )
        for key, doc in alerts.items()
    ]


class AlertBook:
    """Every alert under a state dir, newest first; ``read()`` again reads only the files that changed."""

    def __init__(self, root: Path | None = None, runs: int = RUNS, limit: int = LIMIT) -> None:
        if root is None:
            from gpumon.core.runs.record.store import state_dir

            root = state_dir()
        self.root = root
        self.runs, self.limit = runs, limit
        self._cache: dict[Path, tuple[tuple[int, int], list[AlertEntry]]] = {}
        self._dirs: dict[str, int] = {}  # run directory -> its mtime when last looked into
        self._known: set[Path] = set()  # the runs' attempts files found so far
        self._hot: dict[str, str] = {}  # run directories stat'ed at every read: moved lately
        self._listed: int | None = None  # the runs folder's mtime at the last full scan
        self._full_at = float("-inf")
        self.unreadable: dict[str, str] = {}  # run -> why its alerts cannot be read (another user's run)

    def files(self) -> list[Path]:
        """The attempts files, newest first: the runs' (at most ``runs``) and the state dir's own.

        A run directory is looked into only when its mtime moved (creating alerts.jsonl moves it). Every run
        directory is stat'ed every ``FULL_EVERY_S``; in between only the hot ones (moved in the last
        ``HOT_S``: live runs rename their summary every 2 s) and any new one. The attempts files found are
        stat'ed each time (an append moves only theirs)."""
        now = time.monotonic()
        runs = self.root / "runs"
        try:
            listed = runs.stat().st_mtime_ns
        except OSError:
            listed = None
        if listed != self._listed or now - self._full_at >= FULL_EVERY_S:
            self._listed, self._full_at = listed, now
            with contextlib.suppress(OSError), os.scandir(runs) as entries:
                self._hot = {entry.name: entry.path for entry in entries}  # the scan below cools them
        wall = time.time()
        for name, where in list(self._hot.items()):
            try:
                moved = os.stat(where).st_mtime_ns
            except OSError:
                del self._hot[name]
                continue
            if self._dirs.get(name) != moved:
                self._dirs[name] = moved
                path = Path(where, "alerts.jsonl")
                try:
                    os.stat(path)
                    self._known.add(path)
                    self.unreadable.pop(name, None)
                except PermissionError as err:  # another user's run: the rest are listed, this one named
                    self.unreadable[name] = err.strerror or "permission denied"
                except OSError:
                    pass
            if wall - moved / 1e9 > HOT_S:
                del self._hot[name]
        found: list[tuple[int, Path]] = []
        for path in list(self._known):
            try:
                found.append((path.stat().st_mtime_ns, path))
            except OSError:
                self._known.discard(path)  # pruned
        found.sort(reverse=True)
        own = self.root / "alerts.jsonl"
        return [own, *(p for _, p in found[: self.runs])]

    def read(self) -> list[AlertEntry]:
        entries: list[AlertEntry] = []
        cache: dict[Path, tuple[tuple[int, int], list[AlertEntry]]] = {}
        for path in self.files():
            try:
                st = path.stat()
            except OSError:
                continue
            key = (st.st_mtime_ns, st.st_size)
            hit = self._cache.get(path)
            if hit is not None and hit[0] == key:
                parsed = hit[1]
            else:
                try:
                    parsed = parse(read_records(path, strict=True))
                except PermissionError as err:
                    self.unreadable[path.parent.name] = err.strerror or "permission denied"
                    continue
            cache[path] = (key, parsed)
            entries.extend(parsed)
        self._cache = cache
        entries.sort(key=lambda e: e.t, reverse=True)
        return entries[: self.limit]


def read_at(root: Path) -> float:
    """When the user last looked at the alerts (0: never)."""
    try:
        return float(read_bytes(root / SEEN_FILE).strip() or 0)
    except (OSError, ValueError):
        return 0.0


def mark_read(root: Path, t: float) -> None:
    from gpumon.core.runs.record.store import write_text

    with contextlib.suppress(OSError):  # a full disk: the count stays until it can be written
        write_text(root / SEEN_FILE, f"{t:.3f}\n")
