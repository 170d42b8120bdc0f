"""Delivery off the caller's thread: one worker thread per process, retries with backoff, every attempt recorded.

The attempts file (``alerts.jsonl`` in the run's directory, or the state dir's for alerts of no run) holds one
JSON object per line, appended with one ``os.write`` (mode 0600): an ``alert`` record when one is raised, then
an ``attempt`` record for every try of every channel (docs/events.md). The supervisor calls ``drain`` before
it exits, so a run's end never waits longer than ``DRAIN_S`` on a receiver that is down.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpumon.core.alerts.channels import Channel, Outcome, send
from gpumon.core.safefs import open_own, open_regular

RETRY_S = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0)  # waits between tries: 7 tries over ~60 s, then given up
DRAIN_S = 75.0  # the longest a supervisor waits at its exit for deliveries still trying
TAIL_BYTES = 256 * 1024  # the window check reads no more of an attempts file than this


def append(path: Path, doc: dict[str, Any]) -> None:
    """One line, one write: two processes appending never interleave."""
    fd = open_own(path, os.O_WRONLY | os.O_APPEND)  # a link or FIFO planted there: removed, never followed
    try:
        os.write(fd, (json.dumps(doc, default=str) + "\n").encode())
    finally:
        os.close(fd)


def read_records(path: Path, limit_bytes: int = TAIL_BYTES, strict: bool = False) -> list[dict[str, Any]]:
    """The file's records, from its last ``limit_bytes`` (a partial first line is dropped). ``strict``: a file
    this user may not read raises PermissionError (the caller names the run), else it reads as empty."""
    try:
        with os.fdopen(open_regular(path), "rb") as fh:  # a FIFO there is refused at once, never waited on
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - limit_bytes))
            data = fh.read(limit_bytes)
    except PermissionError:
        if strict:
            raise
        return []
    except OSError:
        return []
    lines = data.split(b"\n")
    if size > limit_bytes:
        lines = lines[1:]
    found = []
    for line in lines:
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            found.append(doc)
    return found


def sent_within(path: Path, kind: str, window_s: float, now: float) -> float | None:
    """When an alert of ``kind`` last went out from this file within the window (None: none did)."""
    last = None
    for doc in read_records(path):
        if doc.get("type") == "alert" and doc.get("kind") == kind and not doc.get("held"):
            t = doc.get("t")
            if isinstance(t, int | float) and now - t < window_s:
                last = t
    return last


@dataclass(order=True)
class _Job:
    due: float
    seq: int
    path: Path = field(compare=False)
    alert: dict[str, Any] = field(compare=False)
    channel: Channel = field(compare=False)
    tries: int = field(default=0, compare=False)


class Deliverer:
    def __init__(self) -> None:
        self._jobs: list[_Job] = []
        self._busy = 0  # jobs taken off the heap and being sent
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def submit(self, path: Path, alert: dict[str, Any], channels: list[Channel]) -> None:
        """Send ``alert`` to every channel, recording each try in ``path``; returns at once."""
        with self._cond:
            for channel in channels:
                heapq.heappush(self._jobs, _Job(time.monotonic(), next(self._seq), path, alert, channel))
            if self._thread is None or not self._thread.is_alive():  # started on the first alert: idle costs 0
                self._thread = threading.Thread(target=self._work, name="gpumon-alerts", daemon=True)
                self._thread.start()
            self._cond.notify()

    def pending(self) -> int:
        with self._cond:
            return len(self._jobs) + self._busy

    def drain(self, timeout_s: float = DRAIN_S) -> int:
        """Wait for every delivery to succeed or give up, at most ``timeout_s``; record what was left untried.
        Returns how many deliveries were left."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while (self._jobs or self._busy) and time.monotonic() < deadline:
                self._cond.wait(min(0.1, max(0.0, deadline - time.monotonic())))
            left, self._jobs = list(self._jobs), []
        for job in left:
            self._record(job, Outcome(False, f"given up: gpumon exited after {timeout_s:g} s of retries"), final=True)
        return len(left)

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._jobs or self._jobs[0].due > time.monotonic():
                    wait = self._jobs[0].due - time.monotonic() if self._jobs else None
                    self._cond.wait(wait)
                job = heapq.heappop(self._jobs)
                self._busy += 1
            try:
                self._attempt(job)
            finally:
                with self._cond:
                    self._busy -= 1
                    self._cond.notify_all()

    def _attempt(self, job: _Job) -> None:
        started = time.monotonic()
        outcome = send(job.channel, job.alert)
        job.tries += 1
        again = not outcome.ok and outcome.retry and job.tries <= len(RETRY_S)
        wait = RETRY_S[job.tries - 1] if again else None
        self._record(job, outcome, final=not again, took=time.monotonic() - started, next_s=wait)
        if wait is not None:
            with self._cond:
                job.due = time.monotonic() + wait
                heapq.heappush(self._jobs, job)

    @staticmethod
    def _record(job: _Job, outcome: Outcome, final: bool, took: float = 0.0, next_s: float | None = None) -> None:
        doc = {
            "type": "attempt",
            "t": round(time.time(), 3),
            "id": job.alert.get("id"),
            "run": job.alert.get("run"),
            "kind": job.alert.get("kind"),
            "channel": job.channel.label,
            "try": job.tries,
            "ok": outcome.ok,
            "reason": outcome.reason,
            "ms": round(took * 1000),
            "final": final,
        }
        if next_s is not None:
            doc["retry_in_s"] = next_s
        with contextlib.suppress(OSError):  # a full disk: the delivery itself still goes on
            append(job.path, doc)


DELIVERER = Deliverer()  # one per process: the supervisor's, the app's, gpumon fleet --watch's
