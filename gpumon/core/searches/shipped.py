"""The search files gpumon ships (``trainers/searches/*.toml``, package data), found by name.

``gpumon tune digits-asha`` and the launch form take a shipped search's name where a path is expected, so the
examples work after a plain install, from any directory. No ray import here.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

SUFFIX = ".toml"


def shipped_dir() -> Path | None:
    """The installed ``trainers/searches`` folder, found without importing anything; None if missing."""
    try:
        found = importlib.util.find_spec("trainers")
    except (ImportError, ValueError):
        return None
    for location in (found.submodule_search_locations or []) if found is not None else []:
        folder = Path(location, "searches")
        if folder.is_dir():
            return folder
    return None


def shipped_searches() -> dict[str, Path]:
    """Name (the file's stem) → absolute path, sorted by name."""
    folder = shipped_dir()
    if folder is None:
        return {}
    return {path.stem: path.resolve() for path in sorted(folder.glob(f"*{SUFFIX}")) if path.is_file()}


def resolve_search(text: str, cwd: str) -> str:
    """A path to a file that exists (relative to ``cwd``) stays as given; else a shipped search's name (with or
    without ``.toml``) becomes its absolute path; anything else stays, for the check to name."""
    given = text.strip()
    if not given or Path(cwd, given).is_file():
        return given
    name = given[: -len(SUFFIX)] if given.endswith(SUFFIX) else given
    if "/" in name or name.startswith("."):
        return given
    path = shipped_searches().get(name)
    return str(path) if path is not None else given


def shipped_names() -> str:
    """'digits-asha, digits-grid, …' (or 'none found' when the install lacks them)."""
    return ", ".join(shipped_searches()) or "none found"
