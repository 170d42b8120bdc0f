"""Directories in the state dir are 0700, parents included: ``mkdir(mode=0o700, parents=True)`` and
``os.makedirs(mode=0o700)`` give the mode to the last folder only, and a run dir moved away under a live run
came back 0755 when a rank recreated ``events/`` inside it."""

from __future__ import annotations

import os


def private_dirs(path: str | os.PathLike[str]) -> None:
    """Make ``path`` and each missing folder above it, each 0700; folders that exist are left as they are."""
    missing: list[str] = []
    current = os.fspath(path)
    while current and not os.path.isdir(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            if not os.path.isdir(folder):
                raise
